package daemon

import (
	"net/netip"
	"sort"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// snapshot groups subflows by connection and adds what the kernel's
// connection counters and the path manager's events say about each; it
// hands the policies the outcomes of the actions taken since the last one.
//
// buf, when not nil, is an array to reuse for the subflows (the round's
// own: tick's, whose last snapshot is no one's when the next is built).
func (d *Daemon) snapshot(now time.Time, sfs []observe.Subflow, conns map[uint32]observe.Conn, buf *[]observe.Subflow) *policy.Snapshot {
	by := map[uint32]*policy.Conn{}
	var order []uint32
	// Connections whose kernel gave no connection-level byte counters
	// (before 6.5): their subflows' are summed instead.
	var summed []*policy.Conn
	get := func(tok uint32) *policy.Conn {
		c := by[tok]
		if c == nil {
			c = &policy.Conn{Token: tok}
			if dc, ok := conns[tok]; ok {
				if !dc.Remote.Addr().IsUnspecified() { // 0.0.0.0:0 while connecting: unknown
					c.Local, c.Remote = dc.Local, dc.Remote
				}
				if dc.Counters {
					c.BytesAcked, c.BytesSent, c.BytesRecv = dc.BytesAcked, dc.BytesSent, dc.BytesRecv
				} else {
					summed = append(summed, c)
				}
			}
			if ev, ok := d.tracker.Conn(tok); ok {
				if !c.Local.IsValid() {
					c.Local, c.Remote = ev.Local, ev.Remote
				}
				c.RemoteAddrs, c.Closed = ev.RemoteAddrs, ev.Closed
				c.ServerSide, c.Established = ev.ServerSide, ev.Established
				if !ev.SideKnown {
					c.ServerSide = guessServerSide(c.Local, c.Remote)
				}
			} else {
				c.ServerSide = guessServerSide(c.Local, c.Remote)
			}
			c.Health = d.healthOf(tok) // the peer's path-health reports (health.go)
			// Data acknowledged or received at the connection level:
			// fully established, whether or not its event was seen.
			c.Established = c.Established || c.BytesAcked > 0 || c.BytesRecv > 0
			by[tok] = c
			order = append(order, tok)
		}
		return c
	}
	// The connections' subflows share one array, each its own part of it
	// (a part's capacity ends where the next begins): no growing per
	// connection.
	counts := map[uint32]int{}
	total := 0
	for i := range sfs {
		if sfs[i].State == observe.TCPEstablished {
			counts[sfs[i].Token]++
			total++
		}
	}
	var all []observe.Subflow
	if buf != nil && cap(*buf) >= total {
		all = (*buf)[:0]
	} else {
		all = make([]observe.Subflow, 0, total)
	}
	if buf != nil {
		defer func() { *buf = all }()
	}
	for _, sf := range sfs {
		switch sf.State {
		case observe.TCPEstablished:
			c := get(sf.Token)
			if c.Subflows == nil {
				n := counts[sf.Token]
				c.Subflows, all = all[len(all):len(all):len(all)+n], all[:len(all)+n]
			}
			c.Subflows = append(c.Subflows, sf)
		case observe.TCPSynSent, observe.TCPSynRecv:
			c := get(sf.Token)
			c.Pending = append(c.Pending, sf)
		}
	}
	// Before 6.5: what the subflows sent, had acknowledged and received
	// (retransmissions and reinjections counted too; a connection's
	// counters would not count them).
	for _, c := range summed {
		for _, sf := range c.Subflows {
			c.BytesAcked += sf.BytesAcked
			c.BytesSent += sf.BytesSent
			c.BytesRecv += sf.BytesRecv
		}
		c.Established = c.Established || c.BytesAcked > 0 || c.BytesRecv > 0
	}
	// Connections the events know of but no sample shows yet (just
	// established).
	for _, tok := range d.tracker.Tokens() {
		if _, ok := conns[tok]; ok || by[tok] != nil {
			continue
		}
		if ev, ok := d.tracker.Conn(tok); ok && ev.Local.IsValid() {
			get(tok)
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	scopes := scopedCgroups(d.engine)
	for _, c := range by {
		d.cgroupOf(c, conns, scopes, now) // appscope.go
	}
	s := &policy.Snapshot{Now: now, Outcomes: d.outcomes}
	d.outcomes = nil
	for _, t := range order {
		if c := by[t]; len(c.Subflows) > 0 || len(c.Pending) > 0 || c.Local.IsValid() {
			s.Conns = append(s.Conns, c)
		}
	}
	return s
}

// guessServerSide: without the connection's own event (the daemon started
// after it), the side that listens is taken to be the one with the lower
// port (services listen on low ports, clients get ephemeral ones).
func guessServerSide(local, remote netip.AddrPort) bool {
	return local.IsValid() && remote.IsValid() && local.Port() < remote.Port()
}
