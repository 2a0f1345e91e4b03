// Package lasthop measures the health of the links that deliver packets to
// this host (its last hops), for the path-health reports it sends its
// peers (RAMPTCP): on a real host the Wi-Fi station information of the
// kernel's nl80211 (signal, transmit retries and failures); in the lab the
// link emulator's own counts of what it dropped and delivered on each
// path's link towards this host. Sources are pluggable: the daemon is
// given a set by name (Sources), and its config picks one.
package lasthop

import (
	"fmt"
	"sort"
	"strings"
	"time"
)

// Sample is the health of one interface's last hop.
type Sample struct {
	// Health is 1 − the share of packets the last hop loses, in [0, 1].
	Health float64
	// Known is false when the source saw too little to tell (an idle
	// link).
	Known bool
	// Detail says what it is made of, for status.
	Detail string
}

// Source measures last hops.
type Source interface {
	// Sample returns the health of the last hop of each interface it
	// knows, by interface name.
	Sample() (map[string]Sample, error)
	// Interval is how often sampling makes sense.
	Interval() time.Duration
	Close() error
}

// Options configure a source.
type Options struct {
	// Window is the span the source counts over (default: the source's).
	Window time.Duration
	// MinPackets: with fewer packets in the window the health is not
	// known (default 5).
	MinPackets int
	// Interfaces limits the source to these interfaces (default: all it
	// finds).
	Interfaces []string
	// NetNS is the name of the daemon's network namespace (the lab source
	// finds its lab by it); Dir a lab's state directory, when given.
	NetNS string
	Dir   string
}

// Factory opens a source.
type Factory func(o Options) (Source, error)

// Sources are the last-hop sources a daemon can open, by name.
type Sources map[string]Factory

// Builtin are the sources of a real host: wifi (nl80211 station
// information). The lab adds its own (internal/lab/world.LabSource).
func Builtin() Sources { return Sources{"wifi": openWifi} }

// Names lists the sources.
func (s Sources) Names() []string {
	out := make([]string, 0, len(s))
	for n := range s {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Open opens the source named name.
func (s Sources) Open(name string, o Options) (Source, error) {
	f := s[name]
	if f == nil {
		return nil, fmt.Errorf("no last-hop source %q (sources: %s)", name, strings.Join(s.Names(), ", "))
	}
	if o.MinPackets <= 0 {
		o.MinPackets = 5
	}
	return f(o)
}

// Ratio is the health from packets delivered and lost over a window
// (Known only from min packets on).
func Ratio(delivered, lost uint64, min int) Sample {
	n := delivered + lost
	s := Sample{Detail: fmt.Sprintf("%d delivered, %d lost", delivered, lost)}
	if n == 0 || n < uint64(min) {
		return s
	}
	s.Health, s.Known = float64(delivered)/float64(n), true
	return s
}
