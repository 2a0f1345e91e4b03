package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// Fullmesh is the M-fullmesh path manager (paper: m-fullmesh-path-
// diversity): N subflows between every pair of a local and a remote
// address the connection can use, so that a network with several paths
// between the same two addresses (ECMP, or a controller that pins each
// subflow to its own path) carries the connection over all of them.
//
// On the client side of a connection it opens the subflows (N per pair,
// the initial subflow counting for its own pair) and re-opens those that
// close, after a backoff that doubles with every failure in a row (the
// kernel never re-opens a subflow by itself). With StallTimeout set, a
// subflow that stalls (data outstanding, no ACK for that long) is closed
// and opened again, on a new port that may take another path; it is off by
// default: closing a subflow that holds data makes this kernel send the
// connection's whole outstanding window again, which cost the lab's
// failure runs seconds of near-stall, while MPTCP's own stale-subflow
// handling moves the data within about a second (docs/results.md). On the
// server side it announces the local addresses, so that the client can
// reach them.
type Fullmesh struct {
	mu sync.Mutex
	FullmeshConfig
	// filter and open hold the rest of its keys: interfaces and exclude;
	// backoff, max_backoff and join_timeout.
	filter   ifaceFilter
	env      Env
	open     opener
	progress map[uint32]*connProgress
	status   []FullmeshConnStatus
}

// connProgress is a connection's data-level progress: its acknowledged
// bytes when it last moved well, its rate and its best recent rate.
type connProgress struct {
	acked uint64
	at    time.Time
	rate  rate
	peak  peak
}

// FullmeshConnStatus is one connection as fullmesh sees it.
type FullmeshConnStatus struct {
	Token     string       `json:"token"`
	Side      string       `json:"side"`
	Pairs     []PairStatus `json:"pairs,omitempty"`
	Announced []string     `json:"announced,omitempty"`
}

// FullmeshConfig is what fullmesh reads of its config entry, with the
// interface filter's keys and the opener's (subflows.go).
type FullmeshConfig struct {
	// N: subflows per pair of a local and a remote address.
	N        int  `yaml:"subflows_per_pair" min:"1" max:"32"`
	Announce bool `yaml:"announce"`
	// StallTimeout: a subflow with data outstanding and no ACK this long
	// is closed and opened again (0: never).
	StallTimeout time.Duration `yaml:"stall_timeout"`
	// ConnStallTimeout: when data is outstanding at the connection level
	// and none of it has been acknowledged for this long (at least 4 of
	// the slowest subflow's RTTs), the connection is stuck on a hole
	// (data a subflow lost, or that the receiver dropped beyond its
	// window) that MPTCP's own retransmission timer backs off on for
	// seconds. Closing a subflow makes MPTCP send everything outstanding
	// again over the others; the subflow is reopened. 0: never.
	ConnStallTimeout time.Duration `yaml:"conn_stall_timeout"`
}

func buildFullmesh(m *yamlcfg.Map, env Env) Policy {
	f := NewFullmesh(env)
	yamlcfg.Decode(m, &f.FullmeshConfig)
	yamlcfg.Decode(m, &f.filter)
	yamlcfg.Decode(m, &f.open)
	f.filter.check(m, env)
	f.open.check(m)
	requireUserspacePM(m, env, "fullmesh")
	return f
}

// NewFullmesh makes the policy with one subflow per pair (the kernel's
// fullmesh), announcing on the server side; a stalled subflow is left to
// MPTCP (see StallTimeout), a stuck connection is rescued after 500 ms.
func NewFullmesh(env Env) *Fullmesh {
	return &Fullmesh{FullmeshConfig: FullmeshConfig{N: 1, Announce: true, ConnStallTimeout: 500 * time.Millisecond},
		env: env, open: newOpener(), progress: map[uint32]*connProgress{}}
}

// Name is "fullmesh".
func (f *Fullmesh) Name() string { return "fullmesh" }

// Decide opens, re-opens and closes subflows so that every pair has N.
func (f *Fullmesh) Decide(s *Snapshot) []Action {
	f.mu.Lock()
	defer f.mu.Unlock()
	locals := f.filter.locals(f.env)
	var out []Action
	var status []FullmeshConnStatus
	live := map[uint32]bool{}
	for _, c := range s.Conns {
		live[c.Token] = true
		cs := FullmeshConnStatus{Token: fmt.Sprintf("%08x", c.Token), Side: "client"}
		out = append(out, f.open.observe(s.Now, c, s.Outcomes, f.Name())...)
		switch {
		case !c.Established:
			cs.Side = "not yet established"
		case c.ServerSide:
			cs.Side = "server"
			out = append(out, f.announce(s.Now, c, locals, &cs)...)
		default:
			out = append(out, f.mesh(s.Now, c, locals, &cs)...)
		}
		status = append(status, cs)
	}
	for tok := range s.Quiet {
		live[tok] = true
	}
	f.open.forget(live)
	for tok := range f.progress {
		if !live[tok] {
			delete(f.progress, tok)
		}
	}
	f.status = keepQuiet(s, status, f.status, func(c FullmeshConnStatus) string { return c.Token })
	return out
}

// announce advertises every allowed local address but the connection's own.
func (f *Fullmesh) announce(now time.Time, c *Conn, locals []localAddr, cs *FullmeshConnStatus) []Action {
	if !f.Announce {
		return nil
	}
	var out []Action
	for _, l := range locals {
		if l.Addr == c.Local.Addr() || l.Addr.Is4() != c.Local.Addr().Is4() {
			continue
		}
		a := Action{Kind: Announce, Token: c.Token, Addr: netip.AddrPortFrom(l.Addr, 0),
			Reason: fmt.Sprintf("server side: the client may open subflows to %s (%s)", l.Addr, l.Iface)}
		out = append(out, f.open.once(now, c.Token, "announce "+a.Addr.String(), a)...)
		cs.Announced = append(cs.Announced, l.Addr.String())
	}
	return out
}

// mesh keeps N subflows on every pair.
func (f *Fullmesh) mesh(now time.Time, c *Conn, locals []localAddr, cs *FullmeshConnStatus) []Action {
	var out []Action
	allowed := map[pair]string{}
	var pairs []pair
	for _, r := range remotes(c) {
		for _, l := range locals {
			if l.Addr.Is4() != r.Addr().Is4() {
				continue
			}
			p := pair{l.Addr, r}
			allowed[p] = l.Iface
			pairs = append(pairs, p)
		}
	}
	// Stalled subflows: closed and opened again (their data moves now).
	gone := map[SubflowID]bool{}
	if f.StallTimeout > 0 && len(c.Subflows) > 1 {
		for _, sf := range c.Subflows {
			// Judged only once the policy has watched it for the
			// timeout: a subflow's ACK clock means nothing at first.
			if sf.Unacked > 0 && sf.LastAckRecv > f.StallTimeout && f.open.age(now, c.Token, ID(sf)) > f.StallTimeout {
				gone[ID(sf)] = true
				out = append(out, f.open.destroy(now, c, sf, fmt.Sprintf("stalled: no ACK for %s with %d packets outstanding (RTO backoff %d)", fmtMs(sf.LastAckRecv), sf.Unacked, sf.Backoff))...)
			}
		}
	}
	out = append(out, f.rescue(now, c, gone)...)
	// Subflows on addresses the policy may not use (or no longer), and
	// more than N on a pair: closed, newest first, never the initial one.
	byPair := map[pair][]SubflowID{}
	for _, sf := range append(append([]observe.Subflow(nil), c.Subflows...), c.Pending...) {
		if !gone[ID(sf)] {
			byPair[pairOf(sf)] = append(byPair[pairOf(sf)], ID(sf))
		}
	}
	initial := NewSubflowID(c.Local, c.Remote)
	for p, ids := range byPair {
		sort.Slice(ids, func(i, j int) bool { return ids[i].Local.Port() < ids[j].Local.Port() })
		keep := f.N
		why := fmt.Sprintf("more than %d subflows on %s", f.N, p)
		if _, ok := allowed[p]; !ok {
			keep, why = 0, fmt.Sprintf("%s is not an address pair this policy may use", p)
		}
		extra := len(ids) - keep
		for i := len(ids) - 1; i >= 0 && extra > 0; i-- {
			if ids[i] == initial {
				continue
			}
			out = append(out, f.open.close(now, c.Token, ids[i], why)...)
			extra--
		}
	}
	for _, p := range pairs {
		n := f.N - f.open.underWay(c.Token, p)
		reason := fmt.Sprintf("%d of %d subflows on %s", f.N-n, f.N, p)
		out = append(out, f.open.open(now, c, p, n, allowed[p], reason)...)
		cs.Pairs = append(cs.Pairs, f.open.pairStatus(now, c.Token, p, f.N))
	}
	return out
}

// rescue closes one subflow of a connection stuck on a hole (see
// ConnStallTimeout): the one that heard from its peer longest ago. Stuck:
// data outstanding at the connection level, and what was acknowledged
// over the timeout is under a twentieth of the connection's best rate
// (a trickle counts as stuck: a hole lets a little through).
func (f *Fullmesh) rescue(now time.Time, c *Conn, gone map[SubflowID]bool) []Action {
	pr := f.progress[c.Token]
	if pr == nil {
		pr = &connProgress{}
		f.progress[c.Token] = pr
	}
	best := pr.peak.add(now, pr.rate.add(now, c.BytesAcked, time.Second), 10*time.Second)
	if c.BytesSent <= c.BytesAcked || pr.acked == 0 && pr.at.IsZero() {
		pr.acked, pr.at = c.BytesAcked, now
		return nil
	}
	if float64(c.BytesAcked-pr.acked) > best/20*now.Sub(pr.at).Seconds() || c.BytesAcked < pr.acked {
		pr.acked, pr.at = c.BytesAcked, now
		return nil
	}
	if f.ConnStallTimeout <= 0 || len(c.Subflows) < 2 {
		return nil
	}
	var slowest time.Duration
	var victim *observe.Subflow
	for i := range c.Subflows {
		sf := &c.Subflows[i]
		slowest = max(slowest, sf.SRTT)
		if gone[ID(*sf)] || f.open.age(now, c.Token, ID(*sf)) < f.ConnStallTimeout {
			continue
		}
		if victim == nil || sf.LastAckRecv > victim.LastAckRecv || sf.LastAckRecv == victim.LastAckRecv && sf.Unacked > victim.Unacked {
			victim = sf
		}
	}
	wait := max(f.ConnStallTimeout, 4*slowest)
	if victim == nil || now.Sub(pr.at) < wait {
		return nil
	}
	why := fmt.Sprintf("connection stuck: %s acknowledged in %s (best %s) with %s outstanding; closing the subflow that heard from its peer longest ago (%s) makes MPTCP send the outstanding data again on the others; it is reopened",
		units.Size(c.BytesAcked-pr.acked), fmtMs(now.Sub(pr.at)), mbit(best), units.Size(c.BytesSent-c.BytesAcked), fmtMs(victim.LastAckRecv))
	pr.acked, pr.at = c.BytesAcked, now // one rescue per wait
	return f.open.close(now, c.Token, ID(*victim), why)
}

// Status reports every connection's pairs.
func (f *Fullmesh) Status() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.status
}
