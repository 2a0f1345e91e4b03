package daemon

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
)

// A joining subflow whose established event arrives before the next sample
// must not look stalled: what the sample said of its SYN (outstanding, no
// ACK ever, a last ACK "uptime ago") says nothing of the subflow now.
func TestEstablishedEventClearsWhatTheJoinLooked(t *testing.T) {
	local, remote := netip.MustParseAddrPort("10.1.0.1:40001"), netip.MustParseAddrPort("10.1.0.2:5201")
	v := view{subflows: []observe.Subflow{{Local: local, Remote: remote, Token: 7, State: observe.TCPSynSent,
		Unacked: 1, LastAckRecv: 3 * time.Hour, Backoff: 2}}}
	if !v.track(pm.Event{Type: pm.EventSubEstablished, Token: 7, Local: local, Remote: remote, LocalID: 3}) {
		t.Fatal("the event was not tracked")
	}
	sf := v.subflows[0]
	if sf.State != observe.TCPEstablished || sf.Unacked != 0 || sf.LastAckRecv != 0 || sf.Backoff != 0 || sf.LocalID != 3 {
		t.Fatalf("after the established event: %+v", sf)
	}
}

// A sample read before events is brought up to date with them: a subflow
// an event established stays, one an event closed does not come back.
func TestAdoptKeepsWhatEventsSaidSinceTheSampleBegan(t *testing.T) {
	a := netip.MustParseAddrPort("10.1.0.1:40001")
	b := netip.MustParseAddrPort("10.2.0.1:40002")
	srv := netip.MustParseAddrPort("10.9.0.2:5201")
	var v view
	start := time.Now()
	// While the sample was read: b joined (an event), a closed (an event).
	v.subflows = []observe.Subflow{{Local: a, Remote: srv, Token: 7, State: observe.TCPEstablished, Cookie: 1}}
	v.track(pm.Event{Type: pm.EventSubEstablished, Token: 7, Local: b, Remote: srv, LocalID: 2})
	v.track(pm.Event{Type: pm.EventSubClosed, Token: 7, Local: a, Remote: srv})
	s := &sample{start: start, end: time.Now(), subflows: []observe.Subflow{{Local: a, Remote: srv, Token: 7, State: observe.TCPEstablished, Cookie: 1}},
		conns: map[uint32]observe.Conn{7: {Token: 7}}}
	v.adopt(s, observe.NewTracker())
	if len(v.subflows) != 1 || v.subflows[0].Local != b {
		t.Fatalf("after adopting: %+v, want only b (a closed, b joined since the sample began)", v.subflows)
	}
}

// Defect: one failed dump of the connections read as "every connection
// gone", and the tracker pruned the addresses the peers had announced
// (which ADD_ADDR never sends again). A failed read is unknown: the
// connections of the read before stand, and nothing is forgotten.
func TestFailedConnectionReadIsUnknownNotGone(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	d.tracker = observe.NewTracker()
	old := time.Now().Add(-time.Minute)
	d.tracker.Handle(pm.Event{Type: pm.EventCreated, Token: 7, Received: old, Local: netip.MustParseAddrPort("10.1.0.1:40001"), Remote: netip.MustParseAddrPort("10.9.0.2:5201")})
	d.tracker.Handle(pm.Event{Type: pm.EventAnnounced, Token: 7, Received: old, RemoteID: 2, Remote: netip.MustParseAddrPort("10.9.1.2:0")})
	sf := observe.Subflow{Local: netip.MustParseAddrPort("10.1.0.1:40001"), Remote: netip.MustParseAddrPort("10.9.0.2:5201"), Token: 7, State: observe.TCPEstablished}
	d.view.adopt(&sample{start: old, end: old, subflows: []observe.Subflow{sf}, conns: map[uint32]observe.Conn{7: {Token: 7}}}, d.tracker)
	d.forgetGone(time.Now())
	d.view.adopt(&sample{start: time.Now(), end: time.Now(), subflows: []observe.Subflow{sf}, connsErr: errDump}, d.tracker)
	d.forgetGone(time.Now())
	c, ok := d.tracker.Conn(7)
	if !ok || len(c.RemoteAddrs) != 1 {
		t.Fatalf("after a failed read of the connections the tracker has %v (ok %v), want the announced address kept", c.RemoteAddrs, ok)
	}
	if _, ok := d.view.conns[7]; !ok || d.view.connsKnown {
		t.Fatalf("conns %v known %v: want the last read standing, marked unknown", d.view.conns, d.view.connsKnown)
	}
}

var errDump = &dumpError{}

type dumpError struct{}

func (*dumpError) Error() string { return "netlink dump interrupted" }
