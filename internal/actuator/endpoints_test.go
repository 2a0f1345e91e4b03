package actuator

import (
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/crashstate"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// fakePM is a kernel path manager's endpoints in memory; calls counts
// what was asked of it.
type fakePM struct {
	eps      map[uint8]pm.Endpoint
	next     uint8
	calls    []string
	setFlags map[netip.AddrPort]pm.Flags // per subflow (local)
	refuse   error                       // every change is refused when set
	limits   pm.Limits
	// refuseAdd: additions are refused (the rest is not).
	refuseAdd error
}

func newFakePM(eps ...pm.Endpoint) *fakePM {
	f := &fakePM{eps: map[uint8]pm.Endpoint{}, next: 10, setFlags: map[netip.AddrPort]pm.Flags{}, limits: pm.Limits{Subflows: 2, AddAddrAccepted: 2}}
	for _, e := range eps {
		f.eps[e.ID] = e
	}
	return f
}

func (f *fakePM) Endpoints() ([]pm.Endpoint, error) {
	f.calls = append(f.calls, "list")
	var out []pm.Endpoint
	for _, e := range f.eps {
		out = append(out, e)
	}
	return out, nil
}

func (f *fakePM) AddEndpoint(e pm.Endpoint) (pm.Endpoint, error) {
	f.calls = append(f.calls, "add "+e.Addr.String())
	if f.refuse != nil {
		return pm.Endpoint{}, f.refuse
	}
	if f.refuseAdd != nil {
		return pm.Endpoint{}, f.refuseAdd
	}
	for _, o := range f.eps {
		if o.Addr == e.Addr {
			return pm.Endpoint{}, errors.New("file exists")
		}
	}
	if e.ID == 0 {
		e.ID = f.next
		f.next++
	} else if _, taken := f.eps[e.ID]; taken {
		return pm.Endpoint{}, errors.New("device or resource busy")
	}
	f.eps[e.ID] = e
	return e, nil
}

func (f *fakePM) Limits() (pm.Limits, error) { return f.limits, nil }

func (f *fakePM) SetEndpointFlags(e pm.Endpoint) error {
	f.calls = append(f.calls, "flags "+e.Addr.String()+" "+e.Flags.String())
	if f.refuse != nil {
		return f.refuse
	}
	old, ok := f.eps[e.ID]
	if !ok {
		return errors.New("no such endpoint")
	}
	old.Flags = e.Flags
	f.eps[e.ID] = old
	return nil
}

func (f *fakePM) DelEndpoint(e pm.Endpoint) error {
	f.calls = append(f.calls, fmt.Sprintf("del %s id %d", e.Addr, e.ID))
	delete(f.eps, e.ID)
	return nil
}

func (f *fakePM) SetSubflowFlags(token uint32, local, remote netip.AddrPort, flags pm.Flags) error {
	f.calls = append(f.calls, "subflow "+local.String())
	if f.refuse != nil {
		return f.refuse
	}
	f.setFlags[local] = flags
	return nil
}

func (f *fakePM) SubflowCreate(uint32, pm.Endpoint, netip.AddrPort) error { return nil }
func (f *fakePM) SubflowDestroy(uint32, netip.AddrPort, netip.AddrPort) error {
	return nil
}
func (f *fakePM) Announce(uint32, pm.Endpoint) error { return nil }
func (f *fakePM) Remove(uint32, uint8) error         { return nil }

func (f *fakePM) flags(id uint8) pm.Flags { return f.eps[id].Flags }

var (
	addrA  = netip.MustParseAddr("10.1.0.1")
	addrB  = netip.MustParseAddr("10.2.0.1")
	server = netip.MustParseAddrPort("10.9.0.2:5201")
)

func est(tok uint32, local netip.Addr, port uint16) observe.Subflow {
	return observe.Subflow{Token: tok, Local: netip.AddrPortFrom(local, port), Remote: server, State: observe.TCPEstablished, Cookie: uint64(port)}
}

func decide(backup bool, sfs ...observe.Subflow) map[policy.SubflowID]policy.Action {
	dec := map[policy.SubflowID]policy.Action{}
	for _, sf := range sfs {
		dec[policy.ID(sf)] = policy.Action{Kind: policy.Backup, Token: sf.Token, Subflow: policy.ID(sf), Backup: backup, Policy: "p", Reason: "test"}
	}
	return dec
}

func newState(t *testing.T) *crashstate.File {
	t.Helper()
	s, err := crashstate.Load(filepath.Join(t.TempDir(), "daemon-netns-1.json"))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func results(recs []api.ActionRecord) string {
	var out []string
	for _, r := range recs {
		out = append(out, r.Kind+":"+r.Result)
	}
	return strings.Join(out, ",")
}

// Defect 4 of the reconciler issue: an address's flag acts on every
// connection from it, so it is decided over every connection that uses
// it. Two connections share address B; a policy wants B backup for one
// and has no opinion on the other (a scoped policy): B stays usable (fail
// open), in an event round (no fresh read) as in a full one. Before, the
// event path passed one connection's subflows and B turned backup for
// both until the next round.
func TestAnAddressIsDecidedOverEveryConnectionUsingIt(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, nil)
	one, two := est(1, addrB, 40001), est(2, addrB, 40002)
	now := time.Unix(100, 0)
	for _, refresh := range []bool{true, false} {
		a.Apply(decide(true, one), []observe.Subflow{one, two}, Round{Now: now, Refresh: refresh})
		if k.flags(2)&pm.FlagBackup != 0 {
			t.Fatalf("refresh %v: B was made backup while connection 2, which no policy decides on, uses it", refresh)
		}
	}
	st := a.Endpoints()
	if len(st) != 1 || st[0].Want != "usable" || !strings.Contains(st[0].Reason, "no policy decides on") {
		t.Fatalf("status %+v: want B usable, saying why", st)
	}
	// Once connection 2 goes, B is made backup.
	a.Apply(decide(true, one), []observe.Subflow{one}, Round{Now: now, Refresh: true})
	if k.flags(2)&pm.FlagBackup == 0 {
		t.Fatal("B not made backup once every connection on it wants it")
	}
}

// Another manager (NetworkManager, mptcpd, an administrator) flips a flag
// the daemon set: reported once, not fought every round, until the
// daemon's own decision for the address changes. Its endpoints the daemon
// decides nothing on are never touched.
func TestAnotherManagersChangeIsYieldedToOnce(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow}, pm.Endpoint{ID: 3, Addr: netip.MustParseAddr("10.3.0.1"), Flags: pm.FlagSignal})
	state := newState(t)
	a := NewEndpointFlags(k, &Gate{}, state, Scope{}, nil)
	sf := est(1, addrB, 40001)
	now := time.Unix(100, 0)
	a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: now, Refresh: true})
	if k.flags(2) != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("flags %v, want subflow,backup", k.flags(2))
	}
	// The other manager takes the backup flag off.
	k.eps[2] = pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow}
	var yielded int
	for i := 0; i < 10; i++ {
		recs := a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: now.Add(time.Duration(i) * 100 * time.Millisecond), Refresh: true})
		for _, r := range recs {
			if r.Result == Yielded {
				yielded++
			}
			if r.Result == string(policy.Applied) {
				t.Fatalf("round %d: the daemon changed the flag back (%s): it fights the other manager", i, results(recs))
			}
		}
	}
	if yielded != 1 {
		t.Fatalf("the conflict was reported %d times, want once", yielded)
	}
	if k.flags(3) != pm.FlagSignal {
		t.Fatal("an endpoint no policy decides on was changed")
	}
	// The decision changes (usable), then changes back (backup): a new
	// decision, applied.
	a.Apply(decide(false, sf), []observe.Subflow{sf}, Round{Now: now.Add(2 * time.Second), Refresh: true})
	a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: now.Add(3 * time.Second), Refresh: true})
	if k.flags(2)&pm.FlagBackup == 0 {
		t.Fatal("a new decision after the conflict was not applied")
	}
	// On exit only what is still the daemon's goes back: the other
	// manager changes it again, and Restore leaves it.
	k.eps[2] = pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow | pm.FlagFullmesh}
	a.Restore()
	if k.flags(2) != pm.FlagSubflow|pm.FlagFullmesh {
		t.Fatalf("restore overwrote another manager's flags: %v", k.flags(2))
	}
}

// An endpoint the other manager removes and adds again (NetworkManager
// does, as an interface comes back) is a new endpoint: the daemon sets
// its decision there once; and an address the config leaves to others is
// never touched, said once.
func TestReplacedEndpointsAndLeftAddresses(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow}, pm.Endpoint{ID: 4, Addr: addrA, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{Leave: []string{addrA.String()}}, nil)
	b, other := est(1, addrB, 40001), est(1, addrA, 40002)
	now := time.Unix(100, 0)
	recs := a.Apply(decide(true, b, other), []observe.Subflow{b, other}, Round{Now: now, Refresh: true})
	if k.flags(4)&pm.FlagBackup != 0 {
		t.Fatal("an address left to others was changed")
	}
	if !strings.Contains(results(recs), "backup:unsupported") {
		t.Fatalf("records %s: want the left address said once", results(recs))
	}
	recs = a.Apply(decide(true, b, other), []observe.Subflow{b, other}, Round{Now: now, Refresh: true})
	if strings.Contains(results(recs), "unsupported") {
		t.Fatal("the left address was said again")
	}
	delete(k.eps, 2)
	k.eps[7] = pm.Endpoint{ID: 7, Addr: addrB, Flags: pm.FlagSubflow}
	a.Apply(decide(true, b, other), []observe.Subflow{b, other}, Round{Now: now.Add(time.Second), Refresh: true})
	if k.flags(7)&pm.FlagBackup == 0 {
		t.Fatal("the decision was not set on the endpoint that replaced the old one")
	}
}

// What a killed daemon left is undone by the next one, only where it is
// still what it set.
func TestRestoreLeftoversOnlyWhereStillOurs(t *testing.T) {
	state := newState(t)
	state.SetFlags(addrA, pm.FlagSubflow, pm.FlagSubflow|pm.FlagBackup)
	state.SetFlags(addrB, pm.FlagSubflow, pm.FlagSubflow|pm.FlagBackup)
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrA, Flags: pm.FlagSubflow | pm.FlagBackup}, pm.Endpoint{ID: 3, Addr: addrB, Flags: pm.FlagSignal})
	RestoreLeftovers(k, state, nil)
	if k.flags(2) != pm.FlagSubflow {
		t.Fatalf("A: %v, want its original flags back", k.flags(2))
	}
	if k.flags(3) != pm.FlagSignal {
		t.Fatalf("B: %v, want another manager's change left alone", k.flags(3))
	}
	if !state.Empty() {
		t.Fatal("the leftovers were not forgotten")
	}
}

// A change the kernel refuses goes through the gate: tried again after a
// backoff, not every round.
func TestRefusedFlagWaitsItsBackoff(t *testing.T) {
	k := newFakePM()
	k.refuse = errors.New("invalid argument")
	g := &Gate{}
	a := NewSubflowFlags(k, g)
	sf := est(1, addrB, 40001)
	now := time.Unix(100, 0)
	tries := 0
	for i := 0; i < 20; i++ { // 2 s of rounds every 100 ms
		n := len(k.calls)
		a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: now.Add(time.Duration(i) * 100 * time.Millisecond), Refresh: true})
		tries += len(k.calls) - n
		g.sweep()
	}
	if tries != 2 { // at 0 and 1 s
		t.Fatalf("%d tries in 2 s, want 2 (a backoff of 1 s)", tries)
	}
}

// A joining subflow's own flag is not set before its join has completed
// (the kernel sends no MP_PRIO before, and refuses): it is reported to be
// watched instead, and set in the first round that sees the join done.
func TestSubflowFlagWaitsForTheJoin(t *testing.T) {
	k := newFakePM()
	a := NewSubflowFlags(k, &Gate{})
	sf := est(1, addrB, 40001)
	sf.BackupLocal, sf.MPFlags = true, observe.FlagJoinLoc // joined as backup, no fourth ACK yet
	now := time.Unix(100, 0)
	recs := a.Apply(decide(false, sf), []observe.Subflow{sf}, Round{Now: now, Refresh: true})
	if len(recs) != 0 || len(k.calls) != 0 || !a.Recheck() || len(a.Joining()) != 1 || a.Joining()[0].Local != sf.Local {
		t.Fatalf("while joining: records %+v, calls %v, recheck %v, joining %v; want no change and the subflow watched", recs, k.calls, a.Recheck(), a.Joining())
	}
	sf.MPFlags |= observe.FlagFullyEst
	recs = a.Apply(decide(false, sf), []observe.Subflow{sf}, Round{Now: now.Add(2 * time.Millisecond), Refresh: true})
	if len(recs) != 1 || recs[0].Result != string(policy.Applied) || a.Recheck() || len(a.Joining()) != 0 {
		t.Fatalf("joined: records %+v, recheck %v, joining %v; want the flag cleared and nothing watched", recs, a.Recheck(), a.Joining())
	}
}

// Linux 6.1 refuses a subflow's own flag under the kernel path manager
// with EINVAL and no reason: the record says why and what to set; under
// the userspace path manager an EINVAL stays the kernel's.
func TestSubflowFlagUnderTheKernelPathManagerSaysWhy(t *testing.T) {
	for _, mode := range []string{observe.KernelPM, observe.UserspacePM} {
		k := newFakePM()
		k.refuse = fmt.Errorf("mptcp_pm set-flags: %w", unix.EINVAL)
		a := NewSubflowFlags(k, &Gate{}).(*subflowFlags)
		a.pathManager = func() string { return mode }
		sf := est(1, addrB, 40001)
		recs := a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: time.Unix(100, 0), Refresh: true})
		if len(recs) != 1 || recs[0].Result != string(policy.Refused) {
			t.Fatalf("%s: %+v", mode, recs)
		}
		says := strings.Contains(recs[0].Error, "needs the userspace path manager") && strings.Contains(recs[0].Error, netnsutil.UserspacePMSetting())
		if says != (mode == observe.KernelPM) || !strings.Contains(recs[0].Error, "invalid argument") {
			t.Errorf("%s: %q", mode, recs[0].Error)
		}
	}
}

// A policy that keeps an address backup on every connection (backup,
// mode's backup interfaces) has its endpoint flagged before any
// connection uses it: a join from it carries the B bit from its first
// packet. Before, the flag came with the daemon's first round after the
// join, and a join under a loaded CPU carried a fifth of an upload
// first (CI's TestModeBackupInterfaceInTheLab). Only the named address
// is touched, and it goes back once no policy asks for it.
func TestBackupAddressesJoinAsBackupBeforeAnyConnection(t *testing.T) {
	addrC := netip.MustParseAddr("10.3.0.1")
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow}, pm.Endpoint{ID: 3, Addr: addrC, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, nil)
	now := time.Unix(100, 0)
	recs := a.Apply(nil, nil, Round{Now: now, Refresh: true, Joins: Joins{BackupAddrs: map[netip.Addr]string{addrB: "backup"}}})
	if k.flags(2) != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("B's endpoint has %q with no connection yet, want subflow,backup (records %s)", k.flags(2), results(recs))
	}
	if len(recs) != 1 || recs[0].Policy != "backup" {
		t.Fatalf("records %+v, want one by the policy that asked", recs)
	}
	if k.flags(3) != pm.FlagSubflow {
		t.Fatalf("C's endpoint changed to %q: no policy named it", k.flags(3))
	}
	// A connection's subflow from B, decided backup: nothing to change.
	sf := est(1, addrB, 40001)
	sf.BackupLocal = true // joined with the B bit
	if recs := a.Apply(decide(true, sf), []observe.Subflow{sf}, Round{Now: now.Add(time.Second), Refresh: true,
		Joins: Joins{BackupAddrs: map[netip.Addr]string{addrB: "backup"}}}); len(recs) != 0 {
		t.Fatalf("records %s, want none: B is backup already", results(recs))
	}
	// The policy goes (a reload): B is as it was.
	a.Apply(nil, nil, Round{Now: now.Add(2 * time.Second), Refresh: true})
	if k.flags(2) != pm.FlagSubflow {
		t.Fatalf("B's endpoint has %q once no policy keeps it backup, want subflow", k.flags(2))
	}
}

// A yield is about one endpoint: when another manager replaces it (an
// interface gone and back, under NetworkManager), the new endpoint is
// decided afresh. Before, the yield outlived it while the address was
// kept backup for joins, and the new endpoint was never flagged.
func TestAYieldEndsWithItsEndpoint(t *testing.T) {
	k := newFakePM(pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow})
	a := NewEndpointFlags(k, &Gate{}, newState(t), Scope{}, nil)
	joins := Joins{BackupAddrs: map[netip.Addr]string{addrB: "backup"}}
	now := time.Unix(100, 0)
	a.Apply(nil, nil, Round{Now: now, Refresh: true, Joins: joins})
	k.eps[2] = pm.Endpoint{ID: 2, Addr: addrB, Flags: pm.FlagSubflow} // another manager takes the flag off
	for i := 1; i <= 3; i++ {
		a.Apply(nil, nil, Round{Now: now.Add(time.Duration(i) * time.Second), Refresh: true, Joins: joins})
		if k.flags(2) != pm.FlagSubflow {
			t.Fatalf("round %d: B has %q: mpsteer fought another manager's change", i, k.flags(2))
		}
	}
	delete(k.eps, 2)
	k.eps[7] = pm.Endpoint{ID: 7, Addr: addrB, Flags: pm.FlagSubflow}
	a.Apply(nil, nil, Round{Now: now.Add(5 * time.Second), Refresh: true, Joins: joins})
	if k.flags(7) != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("B's new endpoint has %q, want subflow,backup", k.flags(7))
	}
}
