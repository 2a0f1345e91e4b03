package observe

import (
	"fmt"
	"os"
	"strconv"
	"strings"

	"mpsteer/internal/netnsutil"
)

// MPTCPCounters are a namespace's MPTCP MIB counters, as /proc/net/netstat
// names them without their "MPTcpExt" prefix (nstat's MPTcpExtDSSNotMatching
// is "DSSNotMatching").
type MPTCPCounters map[string]uint64

// ReadMPTCPCounters reads the counters of a named namespace ("" the
// caller's); a kernel without MPTCP has none (an empty map).
func ReadMPTCPCounters(ns string) (MPTCPCounters, error) {
	var b []byte
	read := func() (err error) { b, err = os.ReadFile("/proc/thread-self/net/netstat"); return err }
	var err error
	if ns == "" {
		err = read()
	} else {
		err = netnsutil.Do(ns, read)
	}
	if err != nil {
		return nil, err
	}
	c, err := ParseMPTCPCounters(string(b))
	if err != nil {
		return nil, fmt.Errorf("/proc/net/netstat of %q: %w", ns, err)
	}
	return c, nil
}

// ParseMPTCPCounters takes /proc/net/netstat's "MPTcpExt:" pair of lines
// (names, then values).
func ParseMPTCPCounters(netstat string) (MPTCPCounters, error) {
	var names []string
	c := MPTCPCounters{}
	for _, line := range strings.Split(netstat, "\n") {
		rest, ok := strings.CutPrefix(line, "MPTcpExt:")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if names == nil {
			names = f
			continue
		}
		if len(f) != len(names) {
			return nil, fmt.Errorf("MPTcpExt has %d names and %d values", len(names), len(f))
		}
		for i, v := range f {
			n, err := strconv.ParseUint(v, 10, 64)
			if err != nil {
				return nil, fmt.Errorf("MPTcpExt %s: %v", names[i], err)
			}
			c[names[i]] = n
		}
		return c, nil
	}
	if names != nil {
		return nil, fmt.Errorf("MPTcpExt names without values")
	}
	return c, nil
}

// Since returns how each counter moved since before, leaving out those
// that did not (a counter that went down, as after a namespace was made
// again, counts from zero).
func (c MPTCPCounters) Since(before MPTCPCounters) MPTCPCounters {
	d := MPTCPCounters{}
	for k, v := range c {
		b := before[k]
		if b > v {
			b = 0
		}
		if v > b {
			d[k] = v - b
		}
	}
	return d
}
