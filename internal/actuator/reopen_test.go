package actuator

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

func reopenWant(tok uint32, local netip.Addr, every time.Duration) policy.Action {
	return policy.Action{Kind: policy.Reopen, Token: tok, Subflow: policy.NewSubflowID(netip.AddrPortFrom(local, 0), server),
		Interval: every, Policy: "prefer", Reason: "test"}
}

func joinSf(tok uint32, local netip.Addr, port uint16) observe.Subflow {
	sf := est(tok, local, port)
	sf.MPFlags |= observe.FlagJoinLoc
	return sf
}

// reads returns a SubflowReader that gives what *sfs holds when called.
func reads(sfs *[]observe.Subflow) SubflowReader {
	return func() ([]observe.Subflow, error) { return *sfs, nil }
}

// epOf is the endpoint of addr in k.
func epOf(k *fakePM, addr netip.Addr) pm.Endpoint {
	for _, e := range k.eps {
		if e.Addr == addr {
			return e
		}
	}
	return pm.Endpoint{}
}

func calls(k *fakePM, verb string) int {
	n := 0
	for _, c := range k.calls {
		if strings.HasPrefix(c, verb+" ") {
			n++
		}
	}
	return n
}

// The endpoint of a stalled preferred address is removed and added again
// with its id, interface and flags but backup, at the pace asked, and
// the crash record of what it was is gone once it is back.
func TestReopenReaddsTheEndpointAtItsPace(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow, IfIndex: 3}, pm.Endpoint{ID: 2, Addr: addrA})
	state := newState(t)
	var now []observe.Subflow
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, reads(&now))
	stalled, other := joinSf(7, addrB, 40001), est(7, addrA, 40000)
	t0 := time.Unix(100, 0)
	// The stalled subflow was made backup first.
	a.Apply(decide(true, stalled), []observe.Subflow{stalled, other}, Round{Now: t0, Refresh: true})
	if k.flags(1) != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("flags %v", k.flags(1))
	}
	now = []observe.Subflow{stalled, other}
	recs := a.Reopen([]policy.Action{reopenWant(7, addrB, 240*time.Millisecond)}, []observe.Subflow{stalled, other}, nil, t0)
	if len(recs) != 1 || recs[0].Result != string(policy.Applied) || recs[0].Kind != "reopen" || recs[0].Policy != "prefer" {
		t.Fatalf("records %+v", recs)
	}
	// Under a spare id (the kernel's pick): a REMOVE_ADDR for id 1 that
	// reaches the peer late cannot close the fresh subflow.
	if e := epOf(k, addrB); e.ID == 1 || e.ID == 0 || e.Flags != pm.FlagSubflow || e.IfIndex != 3 {
		t.Fatalf("re-added %+v, want another id, subflow without backup, ifindex 3", e)
	}
	spare := epOf(k, addrB).ID
	if _, ok := state.ReopeningOf(addrB); ok {
		t.Fatal("the crash record stays after the endpoint is back")
	}
	if ch, ok := state.Changed(addrB); !ok || ch.Original != pm.FlagSubflow {
		t.Fatalf("state %+v: want the original flags kept", ch)
	}
	// The probe from the re-add is joining; the stalled subflow is gone.
	probe := joinSf(7, addrB, 40002)
	probe.State = observe.TCPSynSent
	now = []observe.Subflow{other, probe}
	dels := calls(k, "del")
	for i := 1; i <= 7; i++ {
		at := t0.Add(time.Duration(i) * 100 * time.Millisecond)
		a.Apply(decide(true, other), []observe.Subflow{other}, Round{Now: at, Refresh: true})
		a.Reopen([]policy.Action{reopenWant(7, addrB, 240*time.Millisecond)}, []observe.Subflow{other}, []observe.Subflow{probe}, at)
	}
	// Rounds every 100 ms, a pace of 240 ms: at 300 and 600 ms, under id
	// 1 and the spare in turn; the daemon is told when to look again for
	// the next.
	if got := calls(k, "del") - dels; got != 2 {
		t.Fatalf("%d re-adds in 700 ms at a pace of 240 ms, want 2", got)
	}
	if e := epOf(k, addrB); e.ID != spare {
		t.Fatalf("after three re-adds id %d, want the spare %d (1, spare, 1, spare)", e.ID, spare)
	}
	if due := a.ReopenDue(); !due.Equal(t0.Add(840 * time.Millisecond)) {
		t.Fatalf("next re-add due at %v, want 840 ms", due.Sub(t0))
	}
	if f := epOf(k, addrB).Flags; f != pm.FlagSubflow {
		t.Fatalf("between re-adds the endpoint was set to %v: no subflow left on it, it stays usable for the probe", f)
	}
	// On exit the endpoint has its flags as they were.
	a.Restore()
	if f := epOf(k, addrB).Flags; f != pm.FlagSubflow || !state.Empty() {
		t.Fatalf("after restore: %v, state empty %v", f, state.Empty())
	}
}

// The endpoint acts on every connection from its address: it is not
// re-added while one that does not ask has a subflow there; said once.
func TestReopenWaitsForEveryConnectionUsingTheAddress(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, nil)
	mine, theirs := joinSf(7, addrB, 40001), joinSf(8, addrB, 40002)
	t0 := time.Unix(100, 0)
	var said []api.ActionRecord
	for i := 0; i < 5; i++ {
		said = append(said, a.Reopen([]policy.Action{reopenWant(7, addrB, 100*time.Millisecond)}, []observe.Subflow{mine, theirs}, nil, t0.Add(time.Duration(i)*time.Second))...)
	}
	if calls(k, "del") != 0 {
		t.Fatal("re-added while connection 8 uses it")
	}
	if len(said) != 1 || said[0].Result != string(policy.Unsupported) || !strings.Contains(said[0].Reason, "00000008") {
		t.Fatalf("records %+v, want one naming connection 8", said)
	}
	// Both ask: done.
	a.Reopen([]policy.Action{reopenWant(7, addrB, 100*time.Millisecond), reopenWant(8, addrB, 100*time.Millisecond)}, []observe.Subflow{mine, theirs}, nil, t0.Add(10*time.Second))
	if calls(k, "del") != 1 {
		t.Fatal("not re-added once every connection on it asked")
	}
}

// What is not re-added: a signal endpoint (the peers' path managers would
// act), another manager's endpoint without the subflow flag (it would
// open nothing), an address with no endpoint, one the config leaves to
// others, and one where the limits leave no join for a fresh subflow.
func TestReopenRefusesWhatWouldNotWork(t *testing.T) {
	t0 := time.Unix(100, 0)
	for _, c := range []struct {
		name  string
		eps   []pm.Endpoint
		scope Scope
		sfs   []observe.Subflow
		limit uint32
		want  string
	}{
		{"signal", []pm.Endpoint{{ID: 1, Addr: addrB, Flags: pm.FlagSignal | pm.FlagSubflow}}, Scope{}, nil, 2, "signal"},
		{"no subflow flag", []pm.Endpoint{{ID: 1, Addr: addrB}}, Scope{}, nil, 2, "no subflow flag"},
		{"no endpoint", nil, Scope{}, nil, 2, "has no endpoint"},
		{"left", []pm.Endpoint{{ID: 1, Addr: addrB, Flags: pm.FlagSubflow}}, Scope{Leave: []string{addrB.String()}}, nil, 2, "leaves this address to others"},
		{"limit", []pm.Endpoint{{ID: 1, Addr: addrB, Flags: pm.FlagSubflow}}, Scope{},
			[]observe.Subflow{joinSf(7, addrA, 40001), joinSf(7, netip.MustParseAddr("10.3.0.1"), 40003)}, 2, "subflows limit is 2"},
	} {
		k := newFakePM(c.eps...)
		k.limits.Subflows = c.limit
		a := NewEndpointFlags(k, &Gate{}, newState(t), c.scope, nil)
		recs := a.Reopen([]policy.Action{reopenWant(7, addrB, time.Second)}, c.sfs, nil, t0)
		if calls(k, "del")+calls(k, "add") != 0 {
			t.Errorf("%s: re-added (%v)", c.name, k.calls)
		}
		if len(recs) != 1 || recs[0].Result != string(policy.Unsupported) || !strings.Contains(recs[0].Reason, c.want) {
			t.Errorf("%s: records %+v, want one saying %q", c.name, recs, c.want)
		}
	}
}

// The endpoint mpsteer owns for a connection's own address (its initial
// subflow, id 0 on the wire) is re-added with the subflow flag: without
// it the kernel would open nothing from it. The join the fresh subflow
// takes is counted against the limit: the initial subflow frees none.
func TestReopenOwnedEndpointOfTheInitialAddress(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	state := newState(t)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	initial, join := est(7, addrA, 40000), joinSf(7, addrB, 40001)
	t0 := time.Unix(100, 0)
	// addrA (the initial subflow's) gets an owned endpoint to be backup.
	a.Apply(decide(true, initial), []observe.Subflow{initial, join}, Round{Now: t0, Refresh: true})
	id, owned := state.Owned(addrA)
	if !owned {
		t.Fatal("no owned endpoint for the initial address")
	}
	k.limits.Subflows = 1
	a.Reopen([]policy.Action{reopenWant(7, addrA, time.Second)}, []observe.Subflow{initial, join}, nil, t0)
	if calls(k, "del") != 0 {
		t.Fatal("re-added with no join left for the fresh subflow")
	}
	k.limits.Subflows = 2
	a.Reopen([]policy.Action{reopenWant(7, addrA, time.Second)}, []observe.Subflow{initial, join}, nil, t0.Add(2*time.Second))
	e := epOf(k, addrA)
	if e.Flags != pm.FlagSubflow {
		t.Fatalf("re-added %+v, want mpsteer's endpoint with the subflow flag", e)
	}
	if got, ok := state.Owned(addrA); !ok || got != e.ID || got == id {
		t.Fatalf("owned %d (%v), want the re-added endpoint's spare id %d", got, ok, e.ID)
	}
}

// A fresh subflow from the address that connected since the round's
// sample (its SYN answered) is not closed by a re-add.
func TestReopenSparesASubflowThatJustConnected(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	other := est(7, addrA, 40000)
	answered := joinSf(7, addrB, 40005)
	now := []observe.Subflow{other, answered}
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, reads(&now))
	recs := a.Reopen([]policy.Action{reopenWant(7, addrB, time.Second)}, []observe.Subflow{other}, nil, time.Unix(100, 0))
	if calls(k, "del") != 0 || len(recs) != 0 {
		t.Fatalf("re-added (%v) or said something (%+v) while a fresh subflow had connected", k.calls, recs)
	}
}

// An addition the kernel refuses leaves the endpoint as it was; a daemon
// that died between the removal and the addition has the next one put it
// back.
func TestReopenPutsTheEndpointBack(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow | pm.FlagBackup, IfIndex: 3})
	state := newState(t)
	state.SetFlags(addrB, pm.FlagSubflow, pm.FlagSubflow|pm.FlagBackup)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	sf := joinSf(7, addrB, 40001)
	k.refuseAdd = errors.New("device or resource busy")
	calls := 0
	k2 := &onceRefusing{fakePM: k, calls: &calls}
	a.(*endpointFlags).c = k2
	recs := a.Reopen([]policy.Action{reopenWant(7, addrB, time.Second)}, []observe.Subflow{sf}, nil, time.Unix(100, 0))
	if len(recs) != 1 || recs[0].Result != string(policy.Refused) || !strings.Contains(recs[0].Error, "put back as it was") {
		t.Fatalf("records %+v", recs)
	}
	if e := k.eps[1]; e.Addr != addrB || e.Flags != pm.FlagSubflow|pm.FlagBackup || e.IfIndex != 3 {
		t.Fatalf("endpoint %+v, want it back as it was", e)
	}

	// The daemon died between the two: the state has the record.
	state = newState(t)
	state.Reopening(addrB, pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow, IfIndex: 3})
	k = newFakePM()
	RestoreLeftovers(k, state, nil)
	if e := k.eps[1]; e.Addr != addrB || e.Flags != pm.FlagSubflow || e.IfIndex != 3 {
		t.Fatalf("endpoint %+v, want it put back", e)
	}
	if !state.Empty() {
		t.Fatal("the record stays after it was put back")
	}
}

// onceRefusing refuses the first addition (the re-add) and takes the next
// (putting it back).
type onceRefusing struct {
	*fakePM
	calls *int
}

func (o *onceRefusing) AddEndpoint(e pm.Endpoint) (pm.Endpoint, error) {
	*o.calls++
	if *o.calls == 1 {
		return pm.Endpoint{}, o.refuseAdd
	}
	o.refuseAdd = nil
	return o.fakePM.AddEndpoint(e)
}

// Removing an endpoint closes the subflows from its address on every
// connection, the initial subflows of connections that started there
// included: one mpsteer owns is removed only once no subflow uses it.
func TestOwnedEndpointInUseIsKept(t *testing.T) {
	k := newFakePM()
	state := newState(t)
	var now []observe.Subflow
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, reads(&now))
	initial := est(7, addrA, 40000)
	t0 := time.Unix(100, 0)
	a.Apply(decide(true, initial), []observe.Subflow{initial}, Round{Now: t0, Refresh: true})
	id, owned := state.Owned(addrA)
	if !owned || k.flags(id)&pm.FlagBackup == 0 {
		t.Fatal("no backup endpoint owned for the initial address")
	}
	// No policy decides on it any more, the connection still runs.
	recs := a.Apply(nil, []observe.Subflow{initial}, Round{Now: t0.Add(time.Second), Refresh: true})
	if _, ok := k.eps[id]; !ok || k.flags(id)&pm.FlagBackup != 0 {
		t.Fatalf("endpoint %v (flags %v): want it kept, usable", k.eps[id], k.flags(id))
	}
	if !strings.Contains(results(recs), "endpoint:yielded") {
		t.Fatalf("records %s: want the kept endpoint said", results(recs))
	}
	if recs := a.Apply(nil, []observe.Subflow{initial}, Round{Now: t0.Add(2 * time.Second), Refresh: true}); len(recs) != 0 {
		t.Fatalf("said again: %s", results(recs))
	}
	// On exit with the connection still there: kept, and still owned (the
	// next daemon removes it once unused).
	now = []observe.Subflow{initial}
	a.Restore()
	if _, ok := k.eps[id]; !ok {
		t.Fatal("removed on exit while a subflow uses it")
	}
	if _, ok := state.Owned(addrA); !ok {
		t.Fatal("forgotten: nobody would remove it")
	}
	// The next daemon, the connection gone: removed.
	now = nil
	RestoreLeftovers(k, state, reads(&now))
	if _, ok := k.eps[id]; ok || !state.Empty() {
		t.Fatal("not removed once unused")
	}
}

// A round without the wish (a policy that could not resolve its
// interfaces for a moment) does not reset the pace: the next wish is
// not carried out at once.
func TestReopenPaceSurvivesARoundWithoutTheWish(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, nil)
	t0 := time.Unix(100, 0)
	want := []policy.Action{reopenWant(7, addrB, 240*time.Millisecond)}
	a.Reopen(want, nil, nil, t0)
	a.Reopen(nil, nil, nil, t0.Add(50*time.Millisecond))
	a.Reopen(want, nil, nil, t0.Add(60*time.Millisecond))
	if n := calls(k, "del"); n != 1 {
		t.Fatalf("%d re-adds within 60 ms, want 1", n)
	}
	// Unasked for two intervals: answered, forgotten; the next wish is new.
	a.Reopen(nil, nil, nil, t0.Add(600*time.Millisecond))
	if !a.ReopenDue().IsZero() {
		t.Fatal("still paced after the wishes stopped")
	}
}

// A re-add whose subflows from the address have id 0 (the connection's
// own address: its initial subflow, then the probes from it) removes the
// endpoint and adds it again only once the REMOVE_ADDR for id 0, sent
// over the other path, can have reached the peer before the fresh join,
// which carries id 0 too: the other path's smoothed RTT less the path's
// round trip. The pace counts from the add; a removed endpoint is added
// back even when no one asks any more, and put back as it was on exit.
func TestReopenOfAddressIDZeroWaitsForTheRemoveAddr(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	state := newState(t)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	initial, other := initialAndOther(2)
	slower := joinSf(9, addrA, 40003) // another connection, not asking: not waited for
	slower.SRTT = 500 * time.Millisecond
	sfs := []observe.Subflow{initial, other, slower}
	want := []policy.Action{reopenWant(7, addrB, 300*time.Millisecond)}
	t0 := time.Unix(100, 0)
	// The stalled initial subflow was made backup first.
	a.Apply(decide(true, initial), sfs, Round{Now: t0.Add(-time.Second), Refresh: true})
	if k.flags(1) != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("flags %v", k.flags(1))
	}

	recs := a.Reopen(want, sfs, nil, t0)
	if calls(k, "del") != 1 || calls(k, "add") != 0 {
		t.Fatalf("calls %v: want the endpoint removed and not yet added", k.calls)
	}
	if len(recs) != 1 || recs[0].Result != string(policy.Applied) || !strings.Contains(recs[0].Target, "added again in 60ms") {
		t.Fatalf("records %+v", recs)
	}
	if !a.ReopenPending() || !a.ReopenDue().Equal(t0.Add(60*time.Millisecond)) {
		t.Fatalf("pending %v, due %v: want the add due in 60 ms", a.ReopenPending(), a.ReopenDue().Sub(t0))
	}
	if e, ok := state.ReopeningOf(addrB); !ok || e.Flags != pm.FlagSubflow {
		t.Fatalf("crash record %+v %v: what it was before mpsteer must be kept while it is removed", e, ok)
	}
	// A refresh meanwhile finds it gone and must not forget it.
	a.Apply(decide(false, other), []observe.Subflow{other}, Round{Now: t0.Add(30 * time.Millisecond), Refresh: true})
	a.Reopen(want, []observe.Subflow{other}, nil, t0.Add(30*time.Millisecond))
	if calls(k, "add") != 0 || calls(k, "del") != 1 {
		t.Fatalf("calls %v: nothing before the add is due", k.calls)
	}
	if _, ok := state.ReopeningOf(addrB); !ok {
		t.Fatal("the crash record went while the endpoint was removed")
	}
	// Due: added, though no one asks in this round.
	at := t0.Add(60 * time.Millisecond)
	recs = a.Reopen(nil, []observe.Subflow{other}, nil, at)
	if e := epOf(k, addrB); e.Addr != addrB || e.Flags != pm.FlagSubflow || len(recs) != 1 || !strings.Contains(recs[0].Target, "re-added") {
		t.Fatalf("endpoint %+v, records %+v: want it added without backup", e, recs)
	}
	if a.ReopenPending() || !a.ReopenDue().Equal(at.Add(300*time.Millisecond)) {
		t.Fatalf("pending %v, next due %v after the add: want the pace from the add", a.ReopenPending(), a.ReopenDue().Sub(at))
	}
	if _, ok := state.ReopeningOf(addrB); ok {
		t.Fatal("the crash record stays after the endpoint is back")
	}

	// The probe from it has id 0 as well: the next re-add waits too;
	// the daemon exits before the add: the endpoint is put back as it was.
	probe := est(7, addrB, 40002)
	probe.State = observe.TCPSynSent
	a.Reopen(want, []observe.Subflow{other}, []observe.Subflow{probe}, at.Add(300*time.Millisecond))
	if calls(k, "del") != 2 || !a.ReopenPending() {
		t.Fatalf("calls %v: want the second re-add's removal, pending", k.calls)
	}
	// The path's round trip is remembered from the stalled subflow: the
	// wait is again the other path's 80 ms less the path's 20 ms.
	if due := a.ReopenDue().Sub(at.Add(300 * time.Millisecond)); due != 60*time.Millisecond {
		t.Fatalf("second add due in %v, want 60ms", due)
	}
	a.Restore()
	if e := epOf(k, addrB); e.Addr != addrB || e.Flags != pm.FlagSubflow || !state.Empty() {
		t.Fatalf("after restore: %+v, state empty %v: want it as it was before mpsteer", e, state.Empty())
	}
	if a.Reopen(nil, []observe.Subflow{other}, nil, at.Add(time.Second)); calls(k, "add") != 2 {
		t.Fatalf("calls %v: the add the restore made moot was made after it", k.calls)
	}

	// A join from the address under its endpoint's id: removed and added
	// in one go (the spare id keeps the two apart).
	k2 := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	a2 := NewEndpointFlags(k2, &Gate{}, newState(t), Scope{}, nil)
	stalled := joinSf(7, addrB, 40001)
	stalled.LocalID = 1
	a2.Reopen(want, []observe.Subflow{stalled, other}, nil, t0)
	if calls(k2, "del") != 1 || calls(k2, "add") != 1 || a2.ReopenPending() {
		t.Fatalf("calls %v: want removed and added at once", k2.calls)
	}
}

func goneWant(tok uint32, local netip.Addr) policy.Action {
	w := reopenWant(tok, local, time.Second)
	w.Gone = true
	return w
}

// initialAndOther is connection 7: its initial subflow from addrB (id 0,
// a 20 ms path) and a join from addrA with id otherID on an 80 ms path.
func initialAndOther(otherID uint8) (initial, other observe.Subflow) {
	initial, other = est(7, addrB, 40001), joinSf(7, addrA, 40000)
	initial.MinRTT = 20 * time.Millisecond
	other.SRTT, other.LocalID = 80*time.Millisecond, otherID
	return initial, other
}

// own marks a wish as one for the connection's own address.
func own(w policy.Action) policy.Action {
	w.Own = true
	return w
}

// The subflows of an address no interface has any more are closed at
// once: those of id 0 (the connection's own address) by the kernel's
// removal of id 0 by address, the endpoint left alone; on the address's
// return the re-add is due at once, and with no endpoint left one of
// mpsteer's is added with the subflow flag (no removal: no REMOVE_ADDR to
// race the fresh join). A later re-add of the connection's own address
// waits for its REMOVE_ADDR though no subflow of id 0 shows.
func TestReopenClosesTheSubflowsOfAGoneAddress(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrA, Flags: pm.FlagSubflow})
	state := newState(t)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	initial, other := initialAndOther(1)
	t0 := time.Unix(100, 0)
	recs := a.Reopen([]policy.Action{own(goneWant(7, addrB))}, []observe.Subflow{initial, other}, nil, t0)
	if calls(k, "del") != 1 || !slices.Contains(k.calls, "del "+addrB.String()+" id 0") || calls(k, "add") != 0 {
		t.Fatalf("calls %v: want the id 0 removal of %s alone", k.calls, addrB)
	}
	if len(recs) != 1 || recs[0].Result != string(policy.Applied) || !strings.Contains(recs[0].Target, "subflows of id 0 closed") {
		t.Fatalf("records %+v", recs)
	}
	// Still listed a round later: not again before the pace.
	a.Reopen([]policy.Action{own(goneWant(7, addrB))}, []observe.Subflow{initial, other}, nil, t0.Add(100*time.Millisecond))
	if calls(k, "del") != 1 {
		t.Fatalf("calls %v: closed again within the pace", k.calls)
	}
	// Back, 200 ms later: added at once, mpsteer's, with the subflow flag.
	t1 := t0.Add(200 * time.Millisecond)
	recs = a.Reopen([]policy.Action{own(reopenWant(7, addrB, 300*time.Millisecond))}, []observe.Subflow{other}, nil, t1)
	e := epOf(k, addrB)
	if calls(k, "del") != 1 || e.Flags != pm.FlagSubflow || len(recs) != 1 || !strings.Contains(recs[0].Target, "owned by mpsteer") {
		t.Fatalf("calls %v, endpoint %+v, records %+v: want mpsteer's endpoint added, nothing removed", k.calls, e, recs)
	}
	if id, owned := state.Owned(addrB); !owned || id != e.ID {
		t.Fatalf("owned %d %v, want %d", id, owned, e.ID)
	}
	// Its fresh subflow, closed by the peer, is no longer listed but is
	// still in the connection's list: the next re-add waits for the
	// REMOVE_ADDR all the same (the address is the connection's own).
	a.Reopen([]policy.Action{own(reopenWant(7, addrB, 300*time.Millisecond))}, []observe.Subflow{other}, nil, t1.Add(300*time.Millisecond))
	if calls(k, "del") != 2 || calls(k, "add") != 1 || !a.ReopenPending() {
		t.Fatalf("calls %v, pending %v: want the removal now, the add after the wait", k.calls, a.ReopenPending())
	}
}

// The endpoint mpsteer owns for the connection's own address goes with
// the subflows of a gone address (the return adds a fresh one); subflows
// another connection uses are left alone.
func TestReopenClosesAGoneAddressOnlyWhereItMay(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow})
	state := newState(t)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	initial, join := est(7, addrA, 40000), joinSf(7, addrB, 40001)
	join.LocalID = 1
	t0 := time.Unix(100, 0)
	a.Apply(decide(true, initial), []observe.Subflow{initial, join}, Round{Now: t0, Refresh: true})
	id, owned := state.Owned(addrA)
	if !owned {
		t.Fatal("no owned endpoint for the initial address")
	}
	k.calls = nil
	a.Reopen([]policy.Action{own(goneWant(7, addrA))}, []observe.Subflow{initial, join}, nil, t0.Add(time.Second))
	if calls(k, "del") != 1 || !slices.Contains(k.calls, fmt.Sprintf("del %s id %d", addrA, id)) || epOf(k, addrA).Addr.IsValid() {
		t.Fatalf("calls %v: want mpsteer's endpoint %d removed", k.calls, id)
	}
	if _, owned := state.Owned(addrA); owned || !state.Empty() {
		t.Fatal("the removed endpoint is still recorded as mpsteer's")
	}

	// Another connection's subflow from the address: not closed.
	k2 := newFakePM()
	a2 := NewEndpointFlags(k2, &Gate{}, newState(t), Scope{}, nil)
	theirs := est(9, addrA, 40005)
	recs := a2.Reopen([]policy.Action{own(goneWant(7, addrA))}, []observe.Subflow{initial, theirs}, nil, t0)
	if calls(k2, "del") != 0 || len(recs) != 1 || !strings.Contains(recs[0].Reason, "00000009") {
		t.Fatalf("calls %v, records %+v", k2.calls, recs)
	}
}

// Joins from a gone address under their endpoint's id are closed by
// removing the endpoint, which comes back once an interface has the
// address again, whoever asks then (not before: a join from an address
// that is gone fails and stays in the connections' lists). What it was
// is in the state file meanwhile, and an exit puts it back.
func TestReopenClosesGoneJoinsAndAddsTheEndpointBackOnTheReturn(t *testing.T) {
	for _, exit := range []bool{false, true} {
		k := newFakePM(pm.Endpoint{ID: 1, Addr: addrB, Flags: pm.FlagSubflow, IfIndex: 3})
		state := newState(t)
		here := false
		f := NewEndpointFlags(k, &Gate{}, state, Scope{Interfaces: func() map[string][]netip.Addr {
			if here {
				return map[string][]netip.Addr{"a": {addrA}, "b": {addrB}}
			}
			return map[string][]netip.Addr{"a": {addrA}}
		}}, nil)
		initial, join := est(7, addrA, 40000), joinSf(7, addrB, 40001)
		join.LocalID = 1
		t0 := time.Unix(100, 0)
		recs := f.Reopen([]policy.Action{goneWant(7, addrB)}, []observe.Subflow{initial, join}, nil, t0)
		if calls(k, "del") != 1 || calls(k, "add") != 0 || epOf(k, addrB).Addr.IsValid() || len(recs) != 1 || recs[0].Result != string(policy.Applied) {
			t.Fatalf("calls %v, records %+v: want the endpoint removed, not added", k.calls, recs)
		}
		if _, ok := state.ReopeningOf(addrB); !ok || !f.ReopenPending() || !f.ReopenDue().IsZero() {
			t.Fatalf("crash record %v, pending %v, due %v: want it kept, pending on the address, no time due", ok, f.ReopenPending(), f.ReopenDue())
		}
		if exit {
			f.Restore()
			if e := epOf(k, addrB); e.ID != 1 || e.Flags != pm.FlagSubflow || e.IfIndex != 3 || !state.Empty() {
				t.Fatalf("after the exit: %+v, state empty %v: want it as it was", e, state.Empty())
			}
			continue
		}
		// Still gone: nothing added, asked or not.
		for i, w := range [][]policy.Action{nil, {goneWant(7, addrB)}, {reopenWant(7, addrB, 300*time.Millisecond)}} {
			f.Reopen(w, []observe.Subflow{initial}, nil, t0.Add(time.Duration(i+1)*time.Second))
			if calls(k, "add") != 0 || calls(k, "del") != 1 {
				t.Fatalf("round %d, address gone: calls %v", i, k.calls)
			}
		}
		// Back: added as it was (no backup flag to drop), though no one
		// asks; and with a wish in the same round that add is its re-add
		// (nothing removed again).
		here = true
		f.Reopen([]policy.Action{reopenWant(7, addrB, 300*time.Millisecond)}, []observe.Subflow{initial}, nil, t0.Add(5*time.Second))
		if e := epOf(k, addrB); e.Flags != pm.FlagSubflow || e.IfIndex != 3 || calls(k, "del") != 1 || calls(k, "add") != 1 {
			t.Fatalf("calls %v, endpoint %+v: want it added back on the return, once", k.calls, e)
		}
		if _, ok := state.ReopeningOf(addrB); ok || f.ReopenPending() {
			t.Fatal("the crash record or the pending add stays after the return")
		}
	}
}

// An add that waits for its address's return has no time due: it must not
// hide the time another address is due (the map's order is random, so
// ask many times).
func TestReopenDueSkipsAnAddWaitingForItsAddress(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := &endpointFlags{reopening: map[netip.Addr]*reopenState{
		addrA: {last: t0, interval: time.Second},
		addrB: {pending: &pendingAdd{onReturn: true}},
	}}
	for i := 0; i < 50; i++ {
		if due := a.ReopenDue(); !due.Equal(t0.Add(time.Second)) {
			t.Fatalf("due %v, want addrA's, a second after its last re-add", due)
		}
	}
	if !a.ReopenPending() {
		t.Fatal("an add waiting for its address is not pending")
	}
}
