package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"time"
)

// The fast return under the kernel path manager. There no subflow can be
// opened or closed on its own (the kernel opens them from its endpoints),
// and a stalled subflow comes back only at its next retransmission, at
// least a second apart once backed off (TCP_RTO_MAX_MS cannot go lower).
// What the kernel does offer: removing an endpoint closes the subflows
// from its address on every connection, and adding one makes the kernel
// path manager open a subflow from it on every connection where it may
// (pm_kernel.c). So while a preferred address has no viable subflow
// because the ones there stalled, prefer asks the daemon to re-add its
// endpoint (Reopen): the stalled subflows close (MPTCP sends what they
// held again on the others) and a fresh subflow from the address joins,
// its SYN retransmitted every ProbeInterval (the sockops program sets its
// timeout) — tcp_syn_linear_timeouts times, then backed off. The endpoint
// is re-added again once those retransmissions are spent, so a SYN leaves
// every ProbeInterval for as long as the path is silent; the first one
// the path answers is a subflow like any other, viable and preferred: it
// carries the data, two round trips after its SYN.
//
// Each re-add closes the probe before it, and closing any subflow makes
// this kernel send the connection's whole unacknowledged window again on
// the others: that is the probing's price, paid once per period on the
// paths that carry the data meanwhile (docs/daemon.md). After
// reopenSteadyAfter of silence the period doubles at each re-add up to
// maxReopenPeriod, so a long outage costs little.

// defaultReopenInterval is the probes' SYN timeout under the kernel path
// manager: a silent path hears a SYN this often.
const defaultReopenInterval = 40 * time.Millisecond

// reopenBackoff: an established subflow is given up for a fresh one only
// after this many retransmission timeouts in a row without an ACK (at
// least three of its RTOs of silence: a single timeout is a tail loss on
// a path that works).
const reopenBackoff = 2

// reopenSteadyAfter: the endpoint is re-added at the full pace for this
// long; then the pace halves at every re-add, down to one re-add per
// maxReopenPeriod.
const (
	reopenSteadyAfter = 10 * time.Second
	maxReopenPeriod   = 4 * time.Second
)

// reopenMargin: a re-add waits this much past the moment the answer to
// the probe's last SYN could be back. The daemon's rounds come up to about
// 15 ms off the moment they are due (re-adds due every 280 ms came 270 to
// 296 ms apart on the paper's 40 ms paths), and a re-add that beats a
// SYN/ACK closes the probe that SYN/ACK answers: the path, back, waits for
// the next probe's SYN and two more round trips.
const reopenMargin = 20 * time.Millisecond

// reopenPeriod is how often the endpoint is re-added. The probe's SYNs
// leave at 0 and then tcp_syn_linear_timeouts+1 retransmissions at the
// linear pace; then the timeout doubles, so the next SYNs are 2, 4, 8 ...
// timeouts apart. The re-add comes once those at the linear pace are spent
// (a SYN every ProbeInterval while the path is silent), and not before the
// answer to the probe's last SYN could be back (rtt, the path's round
// trip, and reopenMargin: a re-add closes the probe, and a SYN/ACK on its
// way would find it gone) — nor after the next SYN leaves, whose answer
// the re-add would then close: on a path whose round trip is longer than
// the gap after the last SYN at the linear pace, the re-add waits for the
// answer to the first SYN after it, or the next.
//
// The kernel counts the timeout in whole ticks (slot: ProbeInterval
// rounded up to the tick), and its timer fires a tick late (the timer
// wheel rounds an expiry up so that it never fires early), now and then
// two: at HZ 250 a 40 ms timeout sent the SYNs 44 ms apart, now and then
// 48 (tcpdump on prefer-default-late's probes). A retransmission k
// timeouts after the one before therefore leaves between k·slot + tick
// and k·slot + 2·tick after it; planned at 40 ms, re-adds came up to 16
// ms after a probe's last SYN and closed it as its SYN/ACK arrived.
// probing is how long the address has been probed.
func (p *Prefer) reopenPeriod(probing, rtt time.Duration) time.Duration {
	linear := 4
	if p.env.SynLinearKnown {
		linear = p.env.SynLinearTimeouts
	}
	wait := rtt + reopenMargin
	base := wait // probing off (probe_interval 0s): no SYN schedule
	if p.ProbeInterval > 0 {
		tick := p.env.tick()
		slot := (p.ProbeInterval + tick - 1) / tick * tick
		n := time.Duration(linear + 1)
		// last: by when the SYN whose answer the re-add waits for has
		// left; next: the earliest the SYN after it leaves.
		last, next := n*(slot+2*tick), n*(slot+tick)
		for g := 2 * slot; ; g *= 2 {
			next += g + tick
			if last+wait <= next {
				break
			}
			last += g + 2*tick
		}
		base = max((n+1)*(slot+2*tick), last+wait)
	}
	period := base
	for t := reopenSteadyAfter; probing > t && period < maxReopenPeriod; t += period {
		period *= 2
	}
	return min(period, max(maxReopenPeriod, base))
}

// reopen wants fresh subflows from the preferred addresses of a client
// connection whose subflows there stalled, or were closed by an earlier
// re-add and have no successor established yet.
func (p *Prefer) reopen(now time.Time, c *Conn, st *preferConn, rank map[netip.Addr]int, cs *PreferConnStatus) []Action {
	if st.probing == nil {
		st.probing, st.seenOn, st.closing = map[netip.Addr]*probeState{}, map[netip.Addr]bool{}, map[SubflowID]time.Time{}
	}
	present := map[netip.Addr]bool(nil)
	if p.env.Interfaces != nil {
		present = map[netip.Addr]bool{}
		for _, addrs := range p.env.Interfaces() {
			for _, a := range addrs {
				present[a] = true
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
	// The connection's round trip (its subflows' largest minimum): what
	// a path that never had a subflow of it is taken to have.
	var connRTT time.Duration
	for _, sf := range c.Subflows {
		connRTT = max(connRTT, sf.MinRTT)
	}
	out := p.closeGone(c, st, present, cs)
	for _, a := range addrs {
		if a.Is4() != c.Remote.Addr().Is4() {
			continue
		}
		var est, silent int
		var rtt time.Duration
		healthy := false
		for _, sf := range c.Subflows {
			if sf.Local.Addr() != a {
				continue
			}
			est++
			healthy = healthy || !st.stalled[ID(sf)]
			if sf.Backoff >= reopenBackoff {
				silent++
			}
			rtt = max(rtt, sf.MinRTT)
		}
		if est > 0 {
			st.seenOn[a] = true
		}
		ps := st.probing[a]
		if healthy {
			delete(st.probing, a) // back, or never gone
			continue
		}
		if est == 0 && !st.seenOn[a] {
			// Never had a subflow there. The kernel path manager opens one
			// as the connection is established and never again: one whose
			// SYN met a silent path retries at a second, then 2, 4 … s,
			// and one the kernel reset (this host's 6.18 resets about one
			// join in a hundred at veth speed) is not opened again. So
			// once a join there had time to be established, the address
			// is probed like one whose subflows stalled — unless the
			// connection is on a preferred path ranked as high already:
			// data would not go there, and every re-add makes the kernel
			// send the connection's unacknowledged window again.
			if now.Sub(st.born) < joinGraceBase+2*connRTT || st.active && rank[st.chosen.Local.Addr()] <= rank[a] {
				continue
			}
		}
		if ps == nil {
			ps = &probeState{since: now}
			st.probing[a] = ps
		}
		ps.rtt = max(ps.rtt, rtt)
		probing := now.Sub(ps.since)
		if silent < est {
			// Stalled, but maybe for a moment: a re-add closes the subflow
			// and sends its window again, so only a path silent through
			// reopenBackoff retransmission timeouts in a row is re-added.
			cs.Probing = append(cs.Probing, fmt.Sprintf("%s: stalled for %s, re-added after %d retransmission timeouts in a row", a, fmtMs(probing), reopenBackoff))
			continue
		}
		if present != nil && !present[a] {
			// The interface lost the address: a subflow from it would fail
			// at once (closeGone closed those it had). The daemon decides
			// again on the address event.
			cs.Probing = append(cs.Probing, fmt.Sprintf("%s: address gone, waiting for it (%s)", a, fmtMs(probing)))
			continue
		}
		if ps.rtt == 0 && !st.seenOn[a] {
			ps.rtt = connRTT // no subflow there ever measured the path
		}
		period := p.reopenPeriod(probing, ps.rtt)
		why := "its subflows were closed by the last re-add, no new one answered yet"
		switch {
		case est > 0:
			why = fmt.Sprintf("its %d subflow(s) stalled", est)
		case !st.seenOn[a]:
			why = "no subflow from it was established since the connection was"
		}
		cs.Probing = append(cs.Probing, fmt.Sprintf("%s: reopening for %s, every %s (%s)", a, fmtMs(probing), fmtMs(period), why))
		out = append(out, Action{Kind: Reopen, Token: c.Token, Subflow: NewSubflowID(netip.AddrPortFrom(a, 0), c.Remote), Interval: period, Own: a == c.Local.Addr(),
			Reason: fmt.Sprintf("preferred %s has no viable subflow (%s): fresh subflows from it, their SYN every %s, until the path answers", a, why, fmtMs(p.ProbeInterval))})
	}
	return out
}

// closeGone asks for the subflows from a preferred address that the
// interface lost (it went down) to be closed at once, on every connection
// (the kernel path manager closes subflows by address). They cannot send
// again, and what they held stays theirs until MPTCP's own retransmission
// timer gives it to the others: on prefer-ifdown.yaml the application
// received nothing for 1.5 s after each interface-down while the other
// path carried. Closed, their data is sent on the others at once, and
// when the address is back a fresh subflow joins from it (the actuator,
// reopen.go, adds its endpoint back, with no removal whose REMOVE_ADDR
// would race the join where it can). The wish is repeated every round
// while subflows from the address remain; present is nil when the
// interfaces cannot be read.
func (p *Prefer) closeGone(c *Conn, st *preferConn, present map[netip.Addr]bool, cs *PreferConnStatus) []Action {
	if present == nil {
		return nil
	}
	n := map[netip.Addr]int{}
	var addrs []netip.Addr
	for _, sf := range c.Subflows {
		a := sf.Local.Addr()
		if !st.seenOn[a] || present[a] {
			continue // not a preferred address, or still there
		}
		if n[a] == 0 {
			addrs = append(addrs, a)
		}
		n[a]++
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	var out []Action
	for _, a := range addrs {
		cs.Probing = append(cs.Probing, fmt.Sprintf("%s: address gone: its %d subflow(s) closed, their data sent on the other paths; re-added once it is back", a, n[a]))
		out = append(out, Action{Kind: Reopen, Token: c.Token, Subflow: NewSubflowID(netip.AddrPortFrom(a, 0), c.Remote), Interval: closeGonePace, Gone: true, Own: a == c.Local.Addr(),
			Reason: fmt.Sprintf("preferred %s is gone (its interface lost it): its %d subflow(s) cannot send again; closed now, MPTCP sends what they held on the other paths at once", a, n[a])})
	}
	return out
}

// closeGonePace: how often a close of a gone address's subflows is tried
// again while they remain (the kernel refused, or another connection
// keeps them).
const closeGonePace = time.Second

// joinGraceBase: how long after the daemon first saw a connection a
// subflow from a preferred address that never had one may take to be
// established before the address is probed (and two of the connection's
// round trips more). The kernel path manager opens it one round trip
// after the connection's own handshake; a second covers a busy host.
const joinGraceBase = time.Second
