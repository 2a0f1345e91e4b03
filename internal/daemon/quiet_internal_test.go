package daemon

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

func idleConn(tok uint32, cookie uint64, acked uint64, unacked uint32) *policy.Conn {
	sf := observe.Subflow{Token: tok, Cookie: cookie, State: observe.TCPEstablished, MPTCP: true, BytesAcked: acked, Unacked: unacked,
		Local: netip.AddrPortFrom(netip.MustParseAddr("10.1.0.1"), uint16(cookie)), Remote: netip.MustParseAddrPort("10.1.0.2:5201")}
	return &policy.Conn{Token: tok, Subflows: []observe.Subflow{sf}, Established: true}
}

// An idle connection that did not change is left out of the round (and
// listed as quiet) until quietRefresh has passed; one that moved data,
// carries data in flight, or is new is decided every round.
func TestQuietConnectionsAreDecidedLessOften(t *testing.T) {
	var q quietConns
	t0 := time.Unix(100, 0)
	round := func(at time.Duration, conns ...*policy.Conn) *policy.Snapshot {
		return q.split(&policy.Snapshot{Now: t0.Add(at), Conns: conns})
	}
	decided := func(r *policy.Snapshot) (out []uint32) {
		for _, c := range r.Conns {
			out = append(out, c.Token)
		}
		return out
	}
	if r := round(0, idleConn(1, 11, 100, 0), idleConn(2, 22, 100, 0)); len(r.Conns) != 2 {
		t.Fatalf("first round decided %v, want both", decided(r))
	}
	// Nothing changed; 2 has data in flight now (busy: decided).
	r := round(100*time.Millisecond, idleConn(1, 11, 100, 0), idleConn(2, 22, 100, 3))
	if got := decided(r); len(got) != 1 || got[0] != 2 || !r.Quiet[1] || r.QuietSubflows != 1 {
		t.Fatalf("decided %v, quiet %v (%d subflows); want 2 decided, 1 quiet", got, r.Quiet, r.QuietSubflows)
	}
	// 1 moved data: decided again.
	if got := decided(round(200*time.Millisecond, idleConn(1, 11, 200, 0), idleConn(2, 22, 100, 3))); len(got) != 2 {
		t.Fatalf("decided %v after 1 moved data, want both", got)
	}
	// Unchanged for a while: decided again once quietRefresh has passed.
	if got := decided(round(300*time.Millisecond, idleConn(1, 11, 200, 0))); len(got) != 0 {
		t.Fatalf("decided %v, want none", got)
	}
	if !q.dirty {
		t.Fatal("connection 2 went and the plan is not marked to be put together again")
	}
	if got := decided(round(200*time.Millisecond+quietRefresh, idleConn(1, 11, 200, 0))); len(got) != 1 {
		t.Fatalf("decided %v a refresh later, want 1", got)
	}
}

// The whole plan holds the quiet connections' last decisions beside this
// round's; it is put together and applied again only when a decision or
// a subflow's own flag changed, or a refresh is due.
func TestQuietPlanKeepsDecisionsAndSaysWhenToApply(t *testing.T) {
	var q quietConns
	t0 := time.Unix(100, 0)
	c1, c2 := idleConn(1, 11, 100, 0), idleConn(2, 22, 100, 0)
	id1, id2 := policy.ID(c1.Subflows[0]), policy.ID(c2.Subflows[0])
	decide := func(r *policy.Snapshot, backup bool) *policy.Plan {
		p := policy.NewPlan()
		for _, c := range r.Conns {
			for _, sf := range c.Subflows {
				p.Backup[policy.ID(sf)] = policy.Action{Kind: policy.Backup, Token: c.Token, Subflow: policy.ID(sf), Backup: backup}
			}
		}
		return &p
	}
	var whole policy.Plan
	r := q.split(&policy.Snapshot{Now: t0, Conns: []*policy.Conn{c1, c2}})
	fresh := decide(r, true)
	if !q.keep(fresh, r) {
		t.Fatal("the first round is not applied")
	}
	q.merge(&whole, fresh, r)
	// Next round: 2 busy and decided the same; 1 quiet.
	c2b := idleConn(2, 22, 100, 5)
	r = q.split(&policy.Snapshot{Now: t0.Add(100 * time.Millisecond), Conns: []*policy.Conn{c1, c2b}})
	fresh = decide(r, true)
	if q.keep(fresh, r) {
		t.Fatal("nothing changed, yet the plan is to be applied again")
	}
	// 2's decision flips: applied, with 1's decision kept.
	r = q.split(&policy.Snapshot{Now: t0.Add(200 * time.Millisecond), Conns: []*policy.Conn{c1, c2b}})
	fresh = decide(r, false)
	if !q.keep(fresh, r) {
		t.Fatal("a decision changed and the plan is not applied")
	}
	q.merge(&whole, fresh, r)
	if a, ok := whole.Backup[id1]; !ok || !a.Backup {
		t.Fatalf("quiet connection's decision %+v, %v; want its last (backup)", a, ok)
	}
	if a := whole.Backup[id2]; a.Backup {
		t.Fatalf("decided connection's decision %+v, want this round's", a)
	}
}

// A connection the MPTCP dump caught while connecting (0.0.0.0:0) takes
// its addresses from the events, not the dump.
func TestSnapshotIgnoresUnsetConnectionAddresses(t *testing.T) {
	d := &Daemon{tracker: observe.NewTracker(), engine: &policy.Engine{}, scope: newAppScope()}
	c := idleConn(7, 1, 0, 0)
	conns := map[uint32]observe.Conn{7: {Token: 7, Local: netip.MustParseAddrPort("0.0.0.0:0"), Remote: netip.MustParseAddrPort("0.0.0.0:0")}}
	s := d.snapshot(time.Now(), c.Subflows, conns, nil)
	if len(s.Conns) != 1 || s.Conns[0].Remote.IsValid() {
		t.Fatalf("connections %+v: want one without a remote address", s.Conns)
	}
}
