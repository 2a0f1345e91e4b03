package testutil

import (
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// MPTCPCounters reads the MPTCP MIB counters of a named namespace
// (/proc/net/netstat's MPTcpExt lines, as nstat shows them: "DSSNotMatching"
// is MPTcpExtDSSNotMatching).
func MPTCPCounters(t testing.TB, ns string) map[string]uint64 {
	t.Helper()
	out, err := exec.Command("ip", "netns", "exec", ns, "cat", "/proc/net/netstat").Output()
	if err != nil {
		t.Fatalf("reading %s's /proc/net/netstat: %v", ns, err)
	}
	c, err := parseMPTCPCounters(string(out))
	if err != nil {
		t.Fatalf("%s's /proc/net/netstat: %v", ns, err)
	}
	return c
}

// parseMPTCPCounters takes /proc/net/netstat's "MPTcpExt:" pair of lines
// (names, then values); a kernel without MPTCP has none: an empty map.
func parseMPTCPCounters(netstat string) (map[string]uint64, error) {
	var names []string
	c := map[string]uint64{}
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
