package daemon

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// The snapshot groups interleaved subflows by connection, in the sample's
// order; the connections' subflows share one array, and a policy that
// appends to one connection's subflows does not write over another's.
func TestSnapshotGroupsSubflows(t *testing.T) {
	d := &Daemon{tracker: observe.NewTracker(), engine: &policy.Engine{}, scope: newAppScope()}
	sf := func(tok uint32, port uint16, state uint8) observe.Subflow {
		return observe.Subflow{Token: tok, State: state, MPTCP: true,
			Local: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), port), Remote: netip.MustParseAddrPort("10.1.0.2:5201")}
	}
	sfs := []observe.Subflow{sf(2, 1, observe.TCPEstablished), sf(1, 2, observe.TCPEstablished), sf(2, 3, observe.TCPSynSent), sf(2, 4, observe.TCPEstablished),
		sf(1, 5, observe.TCPEstablished), sf(3, 6, observe.TCPSynSent), sf(1, 7, 7 /* closed */)}
	s := d.snapshot(time.Now(), sfs, nil, nil)
	ports := func(l []observe.Subflow) (out []uint16) {
		for _, x := range l {
			out = append(out, x.Local.Port())
		}
		return out
	}
	want := map[uint32][2]string{1: {"[2 5]", "[]"}, 2: {"[1 4]", "[3]"}, 3: {"[]", "[6]"}}
	if len(s.Conns) != len(want) {
		t.Fatalf("%d connections, want %d", len(s.Conns), len(want))
	}
	for i, c := range s.Conns {
		if i > 0 && s.Conns[i-1].Token >= c.Token {
			t.Fatalf("connections out of order: %d after %d", c.Token, s.Conns[i-1].Token)
		}
		got := [2]string{fmt.Sprint(ports(c.Subflows)), fmt.Sprint(ports(c.Pending))}
		if got != want[c.Token] {
			t.Fatalf("connection %d: subflows, pending %v, want %v", c.Token, got, want[c.Token])
		}
	}
	s.Conns[0].Subflows = append(s.Conns[0].Subflows, sf(1, 99, observe.TCPEstablished))
	if got := fmt.Sprint(ports(s.Conns[1].Subflows)); got != "[1 4]" {
		t.Fatalf("after an append to connection 1's subflows, connection 2's are %s", got)
	}
}

// Where the kernel gives no connection-level byte counters (before 6.5),
// a connection's are its subflows' summed; where it does, they are the
// kernel's.
func TestSnapshotBytesWithoutTheConnectionsCounters(t *testing.T) {
	d := &Daemon{tracker: observe.NewTracker(), engine: &policy.Engine{}, scope: newAppScope()}
	sf := func(tok uint32, port uint16) observe.Subflow {
		return observe.Subflow{Token: tok, State: observe.TCPEstablished, MPTCP: true, BytesSent: 1000, BytesAcked: 900, BytesRecv: 10,
			Local: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), port), Remote: netip.MustParseAddrPort("10.1.0.2:5201")}
	}
	conns := map[uint32]observe.Conn{
		1: {Token: 1},
		2: {Token: 2, Counters: true, BytesSent: 5, BytesAcked: 4, BytesRecv: 3},
	}
	s := d.snapshot(time.Now(), []observe.Subflow{sf(1, 1), sf(1, 2), sf(2, 3)}, conns, nil)
	got := map[uint32][3]uint64{}
	for _, c := range s.Conns {
		got[c.Token] = [3]uint64{c.BytesSent, c.BytesAcked, c.BytesRecv}
		if !c.Established {
			t.Errorf("connection %d with data acknowledged is not established", c.Token)
		}
	}
	if want := map[uint32][3]uint64{1: {2000, 1800, 20}, 2: {5, 4, 3}}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("bytes (sent, acked, received) %v, want %v", got, want)
	}
}
