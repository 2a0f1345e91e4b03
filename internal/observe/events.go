package observe

import (
	"net/netip"
	"sync"
	"time"

	"mpsteer/internal/pm"
)

// ClosedSubflow is a subflow the kernel closed, with why.
type ClosedSubflow struct {
	Local, Remote netip.AddrPort
	At            time.Time
	// Error is the errno the subflow ended with (0: closed cleanly, e.g.
	// by us); ResetReason the MPTCP reset reason when it was reset.
	Error       uint8
	ResetReason uint32
}

// ConnEvents is what the path manager's events told about one
// connection: what inet_diag cannot say (which side opened it, the
// addresses the peer announced, the subflows that went away and why).
type ConnEvents struct {
	Token         uint32
	Local, Remote netip.AddrPort
	// ServerSide is known when SideKnown: the connection's created or
	// established event said so.
	ServerSide, SideKnown bool
	// Established: the connection's established event came (MPTCP is
	// fully established).
	Established bool
	RemoteAddrs map[uint8]netip.AddrPort
	Closed      []ClosedSubflow
	Seen        time.Time // first event
}

// Tracker keeps ConnEvents current from the path manager's events. It is
// safe for concurrent use: the daemon feeds it from its event loop and
// reads it when it builds a snapshot.
type Tracker struct {
	mu    sync.Mutex
	conns map[uint32]*ConnEvents
}

// Closed subflows are kept this long, and at most this many per connection.
const (
	closedKeep = time.Minute
	closedMax  = 64
)

// NewTracker makes an empty tracker.
func NewTracker() *Tracker { return &Tracker{conns: map[uint32]*ConnEvents{}} }

func (t *Tracker) conn(ev pm.Event) *ConnEvents {
	c := t.conns[ev.Token]
	if c == nil {
		c = &ConnEvents{Token: ev.Token, RemoteAddrs: map[uint8]netip.AddrPort{}, Seen: ev.Received}
		t.conns[ev.Token] = c
	}
	return c
}

// Handle takes one event into account.
func (t *Tracker) Handle(ev pm.Event) {
	if ev.Token == 0 {
		return // listener events
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	switch ev.Type {
	case pm.EventClosed:
		delete(t.conns, ev.Token)
	case pm.EventCreated, pm.EventEstablished:
		c := t.conn(ev)
		if ev.Local.IsValid() {
			c.Local, c.Remote = ev.Local, ev.Remote
		}
		c.ServerSide, c.SideKnown = ev.ServerSide, true
		c.Established = c.Established || ev.Type == pm.EventEstablished
	case pm.EventAnnounced:
		if ev.Remote.IsValid() {
			t.conn(ev).RemoteAddrs[ev.RemoteID] = ev.Remote
		}
	case pm.EventRemoved:
		delete(t.conn(ev).RemoteAddrs, ev.RemoteID)
	case pm.EventSubClosed:
		c := t.conn(ev)
		c.Closed = append(c.Closed, ClosedSubflow{Local: ev.Local, Remote: ev.Remote, At: ev.Received,
			Error: ev.Error, ResetReason: ev.ResetReason})
		c.Closed = trimClosed(c.Closed, ev.Received)
	}
}

func trimClosed(cs []ClosedSubflow, now time.Time) []ClosedSubflow {
	i := 0
	for i < len(cs) && (now.Sub(cs[i].At) > closedKeep || len(cs)-i > closedMax) {
		i++
	}
	return cs[i:]
}

// Conn returns a copy of what is known of a connection.
func (t *Tracker) Conn(token uint32) (ConnEvents, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.conns[token]
	if !ok {
		return ConnEvents{}, false
	}
	out := *c
	out.RemoteAddrs = make(map[uint8]netip.AddrPort, len(c.RemoteAddrs))
	for k, v := range c.RemoteAddrs {
		out.RemoteAddrs[k] = v
	}
	out.Closed = append([]ClosedSubflow(nil), c.Closed...)
	return out, true
}

// Tokens lists the connections the tracker knows of.
func (t *Tracker) Tokens() []uint32 {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]uint32, 0, len(t.conns))
	for tok := range t.conns {
		out = append(out, tok)
	}
	return out
}

// Prune forgets connections that are not live any more and were first
// seen before cutoff (a closed event that was missed must not leak).
func (t *Tracker) Prune(live func(token uint32) bool, cutoff time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for tok, c := range t.conns {
		if !live(tok) && c.Seen.Before(cutoff) {
			delete(t.conns, tok)
		}
	}
}
