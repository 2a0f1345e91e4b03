package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// The fast return to the preferred path. A subflow whose path went silent
// keeps its data and retransmits it on its own timer, which the kernel
// backs off to at least a second (TCP_RTO_MAX_MS cannot go lower), so that
// data came back to the preferred path about half a second after the path
// did, and later still after a long outage. Under the userspace path
// manager prefer probes instead: while a preferred address has no viable
// subflow because its subflows stalled (or were lost), it opens a fresh
// subflow from it every ProbeInterval — an MP_JOIN SYN, a few dozen bytes —
// and gives up on each after the interval. The first probe the path
// answers is a subflow like any other; being preferred and viable it takes
// the data at once, and the stalled subflows on that address are closed
// (MPTCP sends what they held again on the others). Data is then back on
// the preferred path one handshake after the path returns: a SYN and its
// SYN/ACK, then the third and fourth ACK of the join (the kernel sends no
// data on a joining subflow before the fourth), about two round trips.
//
// A subflow whose local address no interface has any more (the interface
// went down and lost its address) can never send again: it is closed at
// once, so that MPTCP moves its data now rather than after its timeouts,
// and probing starts the moment the address is back (the daemon decides
// again on every address event).

// defaultProbeInterval is how often a preferred address with no viable
// subflow is probed under the userspace path manager. A silent path is
// heard again only by the next probe SYN: at 100 ms the demo's link-up →
// data was 92–109 ms (40 ms of it the join), at 25 ms 44–48 ms, for
// 0.5–1.2% of its goodput (docs/results.md).
const defaultProbeInterval = 25 * time.Millisecond

// defaultMaxProbes: probes under way at once per address. Each settles at
// one SYN a second; 32 make a SYN about every 31 ms once they have.
const defaultMaxProbes = 32

// probeState is one preferred local address of a connection that has no
// viable subflow.
type probeState struct {
	since  time.Time
	last   time.Time // the last probe asked for
	probes int
	seen   map[SubflowID]time.Time // probes (joining subflows), first seen
	recent []time.Time             // probes asked for lately
	// rtt: the path's round trip, the largest minimum RTT its subflows
	// showed before they stalled (prefer_reopen.go).
	rtt time.Duration
}

// asked counts the probes asked for within the last two intervals (a
// probe asked for shows in the next sample, an interval later at most).
func (ps *probeState) asked(now time.Time, interval time.Duration) int {
	keep := ps.recent[:0]
	for _, t := range ps.recent {
		if now.Sub(t) < 2*interval {
			keep = append(keep, t)
		}
	}
	ps.recent = keep
	return len(keep)
}

// maxProbes is how many probes of one address may be under way at once.
func (p *Prefer) maxProbes() int {
	if p.MaxProbes > 0 {
		return p.MaxProbes
	}
	return defaultMaxProbes
}

// decodePreferOpening reads the keys of prefer's opening of subflows and
// its probes, where prefer can open subflows: under the userspace path
// manager, or one not known yet (a scenario checked off the host). Under
// the kernel path manager, and with open_subflows: false, those keys have
// no use and are refused, but for the ones that say "off".
func decodePreferOpening(p *Prefer, m *yamlcfg.Map, env Env) {
	open := PreferOpenConfig{OpenSubflows: true}
	if env.PathManager == KernelPM {
		open.OpenSubflows = false
	}
	yamlcfg.Decode(m, &open)
	yamlcfg.Decode(m, &p.PreferProbeConfig)
	needs := "under the kernel path manager the probes are the subflows the kernel opens from the re-added endpoint, one per connection at a time (probe_interval sets their SYN timeout); several probes side by side need the userspace path manager: set " + env.UserspacePMSetting() + " in this network namespace (prefer then opens the connection's subflows itself)"
	switch {
	case m.Failed("probe_interval"):
	case p.ProbeInterval > 0 && p.ProbeInterval < 10*time.Millisecond:
		m.Errorf("probe_interval", "%v is below 10ms: a probe every few milliseconds costs more than it gains (0s turns probing off)", p.ProbeInterval)
	case p.ProbeInterval > 0 && env.PathManager == KernelPM && p.ProbeInterval > time.Second:
		m.Errorf("probe_interval", "%v is above 1s: the kernel retransmits a stalled subflow at least once a second on its own (0s turns probing off)", p.ProbeInterval)
	case p.ProbeInterval > 0 && env.PathManager != KernelPM && !open.OpenSubflows && m.Has("probe_interval"):
		m.Errorf("probe_interval", "probes are subflows prefer opens: with open_subflows: false, set probe_interval: 0s")
	}
	switch {
	case !m.Has("max_probes") || m.Failed("max_probes"):
	case env.PathManager == KernelPM:
		m.Errorf("max_probes", "%s; leave max_probes out", needs)
	case !open.OpenSubflows:
		m.Errorf("max_probes", "probes are subflows prefer opens: with open_subflows: false there are none; leave max_probes out")
	}
	if open.OpenSubflows && env.PathManager == KernelPM && !m.Failed("open_subflows") {
		m.Errorf("open_subflows", "prefer opens subflows only under the userspace path manager (%s); under the kernel path manager its endpoints do", env.UserspacePMSetting())
	}
	if !open.OpenSubflows && env.PathManager != KernelPM {
		// Something else opens the subflows (mptcpd, the application):
		// prefer neither does nor probes; it still decides backup.
		p.mesh, p.ProbeInterval = nil, 0
	}
}

// lifecycle probes the preferred addresses of a connection that have no
// viable subflow, closes stalled subflows once a probe got through, and
// closes subflows whose local address is gone.
func (p *Prefer) lifecycle(now time.Time, c *Conn, rank map[netip.Addr]int, cs *PreferConnStatus) []Action {
	st := p.conns[c.Token]
	if p.ProbeInterval <= 0 || st == nil || c.ServerSide || !c.Established || !c.Remote.IsValid() {
		return nil
	}
	if p.env.PathManager == KernelPM {
		return p.reopen(now, c, st, rank, cs) // prefer_reopen.go
	}
	if st.probing == nil {
		st.probing, st.seenOn, st.closing = map[netip.Addr]*probeState{}, map[netip.Addr]bool{}, map[SubflowID]time.Time{}
	}
	var out []Action
	closeSf := func(id SubflowID, why string) {
		if at, ok := st.closing[id]; ok && now.Sub(at) < closeTimeout {
			return
		}
		st.closing[id] = now
		out = append(out, Action{Kind: Destroy, Token: c.Token, Subflow: id, Reason: why})
	}
	all := map[string][]netip.Addr(nil)
	if p.env.Interfaces != nil {
		all = p.env.Interfaces()
	}
	gone := map[SubflowID]bool{}
	if all != nil {
		have := map[netip.Addr]bool{}
		for _, addrs := range all {
			for _, a := range addrs {
				have[a] = true
			}
		}
		for _, sf := range append(append([]observe.Subflow(nil), c.Subflows...), c.Pending...) {
			if !have[sf.Local.Addr()] {
				gone[ID(sf)] = true
				closeSf(ID(sf), fmt.Sprintf("its local address %s is gone (the interface went down): it cannot send again, and closing it moves its data to the other subflows now", sf.Local.Addr()))
			}
		}
	}
	addrs := make([]netip.Addr, 0, len(rank))
	for a := range rank {
		addrs = append(addrs, a)
	}
	sort.Slice(addrs, func(i, j int) bool {
		return rank[addrs[i]] < rank[addrs[j]] || rank[addrs[i]] == rank[addrs[j]] && addrs[i].Less(addrs[j])
	})
	for _, a := range addrs {
		if a.Is4() != c.Remote.Addr().Is4() {
			continue
		}
		var est, pend []observe.Subflow
		for _, sf := range c.Subflows {
			if sf.Local.Addr() == a && !gone[ID(sf)] {
				est = append(est, sf)
			}
		}
		for _, sf := range c.Pending {
			if sf.Local.Addr() == a && !gone[ID(sf)] {
				pend = append(pend, sf)
			}
		}
		if len(est) > 0 {
			st.seenOn[a] = true
		}
		var healthy *observe.Subflow
		for i := range est {
			if !st.stalled[ID(est[i])] {
				healthy = &est[i]
				break
			}
		}
		ps := st.probing[a]
		if healthy != nil {
			if ps != nil {
				for _, sf := range est {
					if st.stalled[ID(sf)] {
						closeSf(ID(sf), fmt.Sprintf("stalled; %s on the same address is viable: the preferred path answers again (after %s and %d probe(s))", ID(*healthy), fmtMs(now.Sub(ps.since)), ps.probes))
					}
				}
				for _, sf := range pend {
					closeSf(ID(sf), "probe no longer needed: the preferred path answers again")
				}
				delete(st.probing, a)
			}
			continue
		}
		if len(est) == 0 && !st.seenOn[a] {
			continue // not opened yet: the mesh opens it
		}
		if ps == nil {
			ps = &probeState{since: now, seen: map[SubflowID]time.Time{}}
			st.probing[a] = ps
		}
		// Probes are never closed while the path is silent: closing any
		// subflow makes this kernel send the connection's whole
		// unacknowledged window again on the others (seen as a near-stall
		// of the transfer when probes were replaced every interval). Each
		// probe keeps retransmitting its SYN (the sockops program gives it
		// a short SYN timeout, 127 retries and a backoff capped at 1s), and
		// up to MaxProbes of them, opened an interval apart, interleave.
		live := map[SubflowID]bool{}
		for _, sf := range pend {
			live[ID(sf)] = true
			if _, ok := ps.seen[ID(sf)]; !ok {
				ps.seen[ID(sf)] = now
			}
		}
		for id := range ps.seen {
			if !live[id] {
				delete(ps.seen, id)
			}
		}
		// Asked for but not seen yet count too (the next sample shows them).
		under := max(len(pend), ps.asked(now, p.ProbeInterval))
		// A quarter of slack: rounds come every interval give or take a
		// little, and one a hair early must not skip a probe.
		if under < p.maxProbes() && (ps.last.IsZero() || now.Sub(ps.last) >= p.ProbeInterval*3/4) {
			ps.last = now
			ps.probes++
			ps.recent = append(ps.recent, now)
			why := "no subflow on it"
			if len(est) > 0 {
				why = fmt.Sprintf("%s stalled (no ACK for %s, RTO backoff %d)", ID(est[0]), fmtMs(est[0].LastAckRecv), est[0].Backoff)
			}
			out = append(out, Action{Kind: Create, Token: c.Token, Iface: ifaceOf(all, a),
				Subflow: NewSubflowID(netip.AddrPortFrom(a, 0), c.Remote),
				Reason:  fmt.Sprintf("probe #%d of preferred %s (%s): is the path back?", ps.probes, a, why)})
		}
		cs.Probing = append(cs.Probing, fmt.Sprintf("%s: %d probe(s) in %s", a, ps.probes, fmtMs(now.Sub(ps.since))))
	}
	for id, at := range st.closing {
		if now.Sub(at) > 2*closeTimeout {
			delete(st.closing, id)
		}
	}
	return out
}

// withMesh adds what the mesh wants (the userspace path manager's
// subflows between every local and remote address) to prefer's actions,
// except on preferred addresses the connection has had a subflow on:
// prefer opens and closes those itself.
func (p *Prefer) withMesh(s *Snapshot, out []Action) []Action {
	if p.mesh == nil {
		return out
	}
	rank, _ := p.ranks()
	for _, a := range p.mesh.Decide(s) {
		if a.Kind == Create || a.Kind == Destroy {
			if st := p.conns[a.Token]; st != nil && st.seenOn[a.Subflow.Local.Addr()] && p.ProbeInterval > 0 {
				continue
			}
		}
		if _, preferred := rank[a.Subflow.Local.Addr()]; a.Kind == Create && len(rank) > 0 && !preferred {
			// Other paths join in reserve: they carry nothing until a
			// decision lets them (the first decision on a subflow that has
			// just joined can come before the kernel takes flags for it).
			a.Backup = true
		}
		out = append(out, a)
	}
	return out
}

// synRTO is the SYN timeout of a probe: five SYNs per probe interval (the
// kernel retransmits a SYN at its timeout tcp_syn_linear_timeouts times, 4
// by default, before it backs off), so that a path that returns is heard
// within a fifth of the interval. At least 10ms.
func (p *Prefer) synRTO() time.Duration {
	if p.env.PathManager == KernelPM {
		return p.ProbeInterval // one probe at a time, see prefer_reopen.go
	}
	return max(p.ProbeInterval/5, 10*time.Millisecond)
}

// initial resolves avoid_initial: the local addresses of the volatile
// paths, and the address to open connections from instead — the first
// preferred address not volatile, else the first address (by interface
// name) of an interface not volatile; invalid when there is none or
// nothing is volatile.
func (p *Prefer) initial(rank map[netip.Addr]int) ([]netip.Addr, netip.Addr) {
	if len(p.AvoidInitial) == 0 {
		return nil, netip.Addr{}
	}
	all := map[string][]netip.Addr{}
	if p.env.Interfaces != nil {
		all = p.env.Interfaces()
	}
	volatile := map[netip.Addr]bool{}
	var avoid []netip.Addr
	for _, t := range p.AvoidInitial {
		addrs := all[t]
		if a, err := netip.ParseAddr(t); err == nil {
			addrs = []netip.Addr{a.Unmap()}
		}
		for _, a := range addrs {
			if !volatile[a] {
				volatile[a] = true
				avoid = append(avoid, a)
			}
		}
	}
	if len(avoid) == 0 {
		return nil, netip.Addr{}
	}
	sort.Slice(avoid, func(i, j int) bool { return avoid[i].Less(avoid[j]) })
	present := map[netip.Addr]bool{}
	for _, addrs := range all {
		for _, a := range addrs {
			present[a] = true
		}
	}
	var best netip.Addr
	bestRank := 0
	for a, r := range rank {
		if volatile[a] || !a.Is4() || !present[a] && p.env.Interfaces != nil {
			continue
		}
		if !best.IsValid() || r < bestRank || r == bestRank && a.Less(best) {
			best, bestRank = a, r
		}
	}
	if best.IsValid() {
		return avoid, best
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		for _, a := range all[n] {
			if !volatile[a] && a.Is4() && !a.IsLinkLocalUnicast() {
				return avoid, a
			}
		}
	}
	return avoid, netip.Addr{}
}
