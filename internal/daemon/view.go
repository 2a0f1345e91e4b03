package daemon

import (
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// view is the namespace as the daemon last saw it: the last sample, with
// what path-manager events said since.
type view struct {
	subflows  []observe.Subflow // every state
	conns     map[uint32]observe.Conn
	sampledAt time.Time // when subflows were sampled
	// connsKnown: the last read of the connections worked. A failed read
	// is unknown: the connections of the read before stand, and nothing
	// is forgotten for being absent from it (the tracker would prune
	// addresses the peers announced, which ADD_ADDR never sends again).
	connsKnown bool
	connsErr   string
	// eventAt: when an event last changed the view; closed: the subflows
	// events closed since, so that a sample read before them does not
	// bring them back.
	eventAt time.Time
	closed  []closedByEvent
}

type closedByEvent struct {
	at            time.Time
	token         uint32
	local, remote policy.Endpoint
	conn          bool // the whole connection
}

// adopt makes s the view, with the events handled while it was read
// (they are newer than it); it returns the array the view held before
// (no one's now).
func (v *view) adopt(s *sample, tracker *observe.Tracker) []observe.Subflow {
	sfs := s.subflows
	if v.eventAt.After(s.start) {
		sfs = carryEvents(sfs, v.subflows)
	}
	if len(v.closed) > 0 {
		keep := sfs[:0]
		for _, sf := range sfs {
			if !v.closedAfter(sf, s.start) {
				keep = append(keep, sf)
			}
		}
		sfs = keep
		recent := v.closed[:0]
		for _, c := range v.closed {
			if c.at.After(s.start) {
				recent = append(recent, c)
			}
		}
		v.closed = recent
	}
	old := v.subflows
	v.subflows, v.sampledAt = sfs, s.end
	switch {
	case s.connsErr != nil:
		v.connsKnown, v.connsErr = false, s.connsErr.Error()
		if v.conns == nil {
			v.conns = map[uint32]observe.Conn{}
		}
	default:
		v.conns, v.connsKnown, v.connsErr = s.conns, true, ""
	}
	return old
}

// closedAfter reports whether an event closed sf after t.
func (v *view) closedAfter(sf observe.Subflow, t time.Time) bool {
	for _, c := range v.closed {
		if c.token == sf.Token && c.at.After(t) && (c.conn || c.local == policy.EndpointOf(sf.Local) && c.remote == policy.EndpointOf(sf.Remote)) {
			return true
		}
	}
	return false
}

// track keeps the view current between samples with what an event tells:
// a subflow established (it joins the view, or a joining one there
// becomes established), one closed (it leaves), a connection closed (its
// subflows leave). It reports whether the event concerns a subflow the
// policies should hear of now.
func (v *view) track(ev pm.Event) bool {
	switch ev.Type {
	case pm.EventSubEstablished, pm.EventEstablished:
		if !ev.Local.IsValid() || !ev.Remote.IsValid() {
			return false
		}
		v.eventAt = time.Now()
		for i, o := range v.subflows {
			if o.Token == ev.Token && o.Local == ev.Local && o.Remote == ev.Remote {
				establish(&v.subflows[i], ev.LocalID, ev.RemoteID)
				return true
			}
		}
		v.subflows = append(v.subflows, observe.Subflow{Local: ev.Local, Remote: ev.Remote, Token: ev.Token,
			LocalID: ev.LocalID, RemoteID: ev.RemoteID, BackupRemote: ev.Backup, MPTCP: true, State: observe.TCPEstablished})
		return true
	case pm.EventSubClosed, pm.EventClosed:
		v.eventAt = time.Now()
		conn := ev.Type == pm.EventClosed
		v.closed = append(v.closed, closedByEvent{at: v.eventAt, token: ev.Token, conn: conn,
			local: policy.EndpointOf(ev.Local), remote: policy.EndpointOf(ev.Remote)})
		if len(v.closed) > 4096 {
			v.closed = v.closed[len(v.closed)-4096:]
		}
		keep := v.subflows[:0]
		for _, o := range v.subflows {
			gone := o.Token == ev.Token && (conn || o.Local == ev.Local && o.Remote == ev.Remote)
			if !gone {
				keep = append(keep, o)
			}
		}
		v.subflows = keep
		return !conn
	case pm.EventAnnounced, pm.EventRemoved:
		return true
	}
	return false
}

// establish marks a subflow established, as an event said, with the ids
// it gave. What a sample said of it while it was joining (a SYN
// outstanding, no ACK ever) says nothing of the established subflow: it
// would look stalled.
func establish(sf *observe.Subflow, localID, remoteID uint8) {
	if sf.State != observe.TCPEstablished {
		sf.Unacked, sf.LastAckRecv, sf.Backoff, sf.CAState = 0, 0, 0, 0
	}
	sf.State, sf.LocalID, sf.RemoteID = observe.TCPEstablished, localID, remoteID
}

// carryEvents adds to a sample what path-manager events told after it was
// read: a subflow that joined (events list it without a socket cookie)
// and one it shows still joining that an event said is established.
// Without them the round would undo what the events' decisions did, as
// if no one decided on those subflows any more.
func carryEvents(sfs, view []observe.Subflow) []observe.Subflow {
	est := map[policy.SubflowID]observe.Subflow{}
	for _, o := range view {
		if o.State == observe.TCPEstablished {
			est[policy.ID(o)] = o
		}
	}
	inSample := map[policy.SubflowID]bool{}
	for i := range sfs {
		id := policy.ID(sfs[i])
		inSample[id] = true
		if o, ok := est[id]; ok && (sfs[i].State == observe.TCPSynSent || sfs[i].State == observe.TCPSynRecv) {
			establish(&sfs[i], o.LocalID, o.RemoteID)
		}
	}
	for _, o := range view {
		if o.Cookie == 0 && o.State == observe.TCPEstablished && !inSample[policy.ID(o)] {
			sfs = append(sfs, o)
		}
	}
	return sfs
}

// joining keeps the subflows whose handshake is under way.
func joining(sfs []observe.Subflow) []observe.Subflow {
	var out []observe.Subflow
	for _, sf := range sfs {
		if sf.State == observe.TCPSynSent || sf.State == observe.TCPSynRecv {
			out = append(out, sf)
		}
	}
	return out
}

// established keeps the subflows that carry data.
func established(sfs []observe.Subflow) []observe.Subflow {
	n := 0
	for i := range sfs {
		if sfs[i].State == observe.TCPEstablished {
			n++
		}
	}
	out := make([]observe.Subflow, 0, n)
	for _, sf := range sfs {
		if sf.State == observe.TCPEstablished {
			out = append(out, sf)
		}
	}
	return out
}
