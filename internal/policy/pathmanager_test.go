package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// A host with two interfaces, as the fullmesh poster's: a1 on eth0, a2 on
// eth1; the server at b1 (the connection's) announces b2.
var (
	a1   = netip.MustParseAddr("10.1.0.1")
	a2   = netip.MustParseAddr("10.2.0.1")
	b1   = netip.MustParseAddrPort("10.101.0.2:5201")
	b2   = netip.MustParseAddrPort("10.102.0.2:5201")
	host = Env{
		Interfaces: func() map[string][]netip.Addr {
			return map[string][]netip.Addr{"eth0": {a1}, "eth1": {a2}, "eth2": {netip.MustParseAddr("10.3.0.1")}}
		},
		PathManager: UserspacePM,
	}
)

func subflow(local netip.Addr, port uint16, remote netip.AddrPort, state uint8) observe.Subflow {
	return observe.Subflow{Local: netip.AddrPortFrom(local, port), Remote: remote, Token: 7, MPTCP: true, State: state,
		SRTT: 10 * ms, Cwnd: 10, MSS: 1448}
}

// conn is a client connection from a1:40000 to b1; b2 announced.
func conn(sfs ...observe.Subflow) *Conn {
	c := &Conn{Token: 7, Local: netip.AddrPortFrom(a1, 40000), Remote: b1, Established: true,
		RemoteAddrs: map[uint8]netip.AddrPort{2: netip.AddrPortFrom(b2.Addr(), 0)}}
	for _, sf := range sfs {
		if sf.State == 1 {
			c.Subflows = append(c.Subflows, sf)
		} else {
			c.Pending = append(c.Pending, sf)
		}
	}
	return c
}

func count(acts []Action, k Kind) map[string]int {
	out := map[string]int{}
	for _, a := range acts {
		if a.Kind == k {
			out[a.Target()]++
		}
	}
	return out
}

func decideAt(p Policy, now time.Time, c *Conn, outs ...Outcome) []Action {
	return p.Decide(&Snapshot{Now: now, Conns: []*Conn{c}, Outcomes: outs})
}

func TestFullmeshOpensNPerPair(t *testing.T) {
	f := NewFullmesh(host)
	f.N = 2
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	initial := subflow(a1, 40000, b1, 1)
	acts := decideAt(f, now, conn(initial))
	got := count(acts, Create)
	want := map[string]int{"10.1.0.1→10.101.0.2:5201": 1, "10.2.0.1→10.101.0.2:5201": 2,
		"10.1.0.1→10.102.0.2:5201": 2, "10.2.0.1→10.102.0.2:5201": 2}
	if len(got) != len(want) {
		t.Fatalf("creates %v, want %v", got, want)
	}
	for k, n := range want {
		if got[k] != n {
			t.Fatalf("creates %v, want %v (the initial subflow counts for its pair; the announced port-less address takes the connection's port)", got, want)
		}
	}
	for _, a := range acts {
		if a.Kind == Create && (a.Iface == "" || a.Reason == "") {
			t.Fatalf("create without interface or reason: %+v", a)
		}
	}
	// Next round: nothing has shown up yet, the creations are under way.
	if acts := decideAt(f, now.Add(100*ms), conn(initial)); len(count(acts, Create)) != 0 {
		t.Fatalf("asked again while under way: %v", count(acts, Create))
	}
	// They show up joining, then established: nothing more to do.
	var all []observe.Subflow
	all = append(all, initial)
	port := uint16(50000)
	for k, n := range want {
		l, _ := netip.ParseAddr(strings.Split(k, "→")[0])
		r := netip.MustParseAddrPort(strings.Split(k, "→")[1])
		for i := 0; i < n; i++ {
			all = append(all, subflow(l, port, r, 2))
			port++
		}
	}
	if acts := decideAt(f, now.Add(200*ms), conn(all...)); len(acts) != 0 {
		t.Fatalf("actions with every subflow joining: %v", acts)
	}
	for i := range all {
		all[i].State = 1
	}
	if acts := decideAt(f, now.Add(300*ms), conn(all...)); len(acts) != 0 {
		t.Fatalf("actions with the mesh complete: %v", acts)
	}
}

func TestFullmeshReopensWithBackoff(t *testing.T) {
	f := NewFullmesh(host)
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	initial := subflow(a1, 40000, b1, 1)
	second := subflow(a2, 50000, b1, 1)
	c := conn(initial, second)
	c.RemoteAddrs = nil
	if acts := decideAt(f, now, c); len(acts) != 0 {
		t.Fatalf("a complete mesh asked for %v", acts)
	}
	// The second subflow dies (reset by the path): reopened after 1 s,
	// not at once.
	closedAt := now.Add(time.Second)
	c = conn(initial)
	c.RemoteAddrs = nil
	c.Closed = []observe.ClosedSubflow{{Local: second.Local, Remote: b1, At: closedAt, Error: 104}}
	if acts := decideAt(f, closedAt.Add(100*ms), c); len(count(acts, Create)) != 0 {
		t.Fatalf("reopened without waiting: %v", acts)
	}
	acts := decideAt(f, closedAt.Add(1100*ms), c)
	if count(acts, Create)["10.2.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("not reopened after the backoff: %v", acts)
	}
	// The kernel refuses the join: the next try waits twice as long.
	refused := Outcome{Action: acts[0], Result: Refused, Error: "mptcp_pm subflow-create: no route", At: closedAt.Add(1100 * ms)}
	refused.Action.Policy = "fullmesh"
	at := closedAt.Add(1200 * ms)
	if acts := decideAt(f, at, c, refused); len(count(acts, Create)) != 0 {
		t.Fatalf("retried at once after a refusal: %v", acts)
	}
	if acts := decideAt(f, at.Add(1500*ms), c); len(count(acts, Create)) != 0 {
		t.Fatalf("retried before 2 s: %v", acts)
	}
	acts = decideAt(f, at.Add(2100*ms), c)
	if count(acts, Create)["10.2.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("not retried after 2 s: %v", acts)
	}
	st := f.Status().([]FullmeshConnStatus)
	if len(st) != 1 || st[0].Pairs[1].Failures != 2 || !strings.Contains(st[0].Pairs[1].LastError, "no route") {
		t.Fatalf("status %+v", st)
	}
	// A join that hangs (the path is down) is given up after join_timeout.
	at = at.Add(2100 * ms)
	hanging := subflow(a2, 50001, b1, 2)
	c2 := conn(initial, hanging)
	c2.RemoteAddrs = nil
	decideAt(f, at.Add(100*ms), c2)
	acts = decideAt(f, at.Add(100*ms+f.open.JoinTimeout+time.Millisecond), c2)
	if d := count(acts, Destroy); d["10.2.0.1:50001→10.101.0.2:5201"] != 1 {
		t.Fatalf("a hanging join was not given up: %v", acts)
	}
	// And once one joins and stays up for a backoff, the failures are
	// forgotten.
	c3 := conn(initial, subflow(a2, 50002, b1, 1))
	c3.RemoteAddrs = nil
	decideAt(f, at.Add(10*time.Second), c3)
	decideAt(f, at.Add(11*time.Second), c3)
	if st := f.Status().([]FullmeshConnStatus); st[0].Pairs[1].Failures != 0 {
		t.Fatalf("failures after a join: %+v", st[0].Pairs[1])
	}
}

// A peer whose subflow limit is reached completes each join's handshake
// and resets it at once: the subflow shows up established and closes.
// That is a failure, and the backoff keeps growing; it used to count as a
// join that worked, and the pair was reopened hundreds of times a second
// (found by internal/reliability's TestKernelSaysNo).
func TestFullmeshJoinResetAtOnceKeepsTheBackoff(t *testing.T) {
	f := NewFullmesh(host)
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	initial := subflow(a1, 40000, b1, 1)
	c := conn(initial)
	c.RemoteAddrs = nil
	if acts := decideAt(f, now, c); count(acts, Create)["10.2.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("first create: %v", acts)
	}
	creates := 0
	port := uint16(50000)
	var closed []observe.ClosedSubflow
	// 10 s of events: each creation is established and reset 1 ms later.
	for at := now.Add(ms); at.Before(now.Add(10 * time.Second)); at = at.Add(ms) {
		st := f.Status().([]FullmeshConnStatus)
		if st[0].Pairs[1].UnderWay == 0 {
			acts := decideAt(f, at, c)
			creates += count(acts, Create)["10.2.0.1→10.101.0.2:5201"]
			continue
		}
		sf := subflow(a2, port, b1, 1)
		up := conn(initial, sf)
		up.RemoteAddrs, up.Closed = nil, closed
		creates += count(decideAt(f, at, up), Create)["10.2.0.1→10.101.0.2:5201"]
		closed = append(closed, observe.ClosedSubflow{Local: sf.Local, Remote: b1, At: at.Add(ms / 2), Error: 104})
		c.Closed = closed
		at = at.Add(ms)
		creates += count(decideAt(f, at, c), Create)["10.2.0.1→10.101.0.2:5201"]
		port++
	}
	// Backoff 1 s doubling: tries at about 0, 1, 3, 7 s.
	if creates > 5 {
		t.Fatalf("%d creations in 10 s on a pair whose joins are all reset at once, want the backoff to hold them to a few", creates)
	}
}

func TestFullmeshClosesStalledAndForeignSubflows(t *testing.T) {
	f := NewFullmesh(host)
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	f.StallTimeout = 2 * time.Second // off by default
	now := time.Unix(100, 0)
	initial := subflow(a1, 40000, b1, 1)
	stalled := subflow(a2, 50000, b1, 1)
	foreign := subflow(netip.MustParseAddr("10.3.0.1"), 50001, b1, 1) // eth2: not allowed
	c := conn(initial, stalled, foreign)
	c.RemoteAddrs = nil
	// A subflow's ACK clock means nothing when the policy first sees it
	// (a new socket reports hours since its "last ACK"): not a stall.
	c.Subflows[1].Unacked, c.Subflows[1].LastAckRecv = 1, 3456972*ms
	if d := count(decideAt(f, now, c), Destroy); d[ID(stalled).String()] != 0 {
		t.Fatalf("a subflow seen for the first time was judged stalled: %v", d)
	}
	c.Subflows[1].Unacked, c.Subflows[1].LastAckRecv, c.Subflows[1].Backoff = 20, 2500*ms, 2
	acts := decideAt(f, now.Add(3*time.Second), c)
	d := count(acts, Destroy)
	if d[ID(stalled).String()] != 1 || len(d) != 2 {
		t.Fatalf("destroys %v, want the stalled and the foreign subflow", d)
	}
	for _, a := range acts {
		if a.Kind == Destroy && ID(stalled) == a.Subflow && !strings.Contains(a.Reason, "stalled") {
			t.Fatalf("reason %q", a.Reason)
		}
	}
}

func TestFullmeshAnnouncesOnTheServerSide(t *testing.T) {
	f := NewFullmesh(host)
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	c := &Conn{Token: 9, Local: netip.AddrPortFrom(a1, 5201), Remote: netip.MustParseAddrPort("10.9.0.1:40000"), ServerSide: true, Established: true,
		Subflows: []observe.Subflow{subflow(a1, 5201, netip.MustParseAddrPort("10.9.0.1:40000"), 1)}}
	acts := decideAt(f, now, c)
	if len(acts) != 1 || acts[0].Kind != Announce || acts[0].Addr.Addr() != a2 {
		t.Fatalf("server side: %v, want one announcement of %s", acts, a2)
	}
	if acts := decideAt(f, now.Add(100*ms), c); len(acts) != 0 {
		t.Fatalf("announced twice: %v", acts)
	}
	// Refused: tried again later, not every round.
	out := Outcome{Action: Action{Kind: Announce, Token: 9, Addr: netip.AddrPortFrom(a2, 0), Policy: "fullmesh"}, Result: Refused, Error: "EBUSY"}
	if acts := decideAt(f, now.Add(200*ms), c, out); len(acts) != 0 {
		t.Fatalf("retried at once: %v", acts)
	}
	if acts := decideAt(f, now.Add(200*ms+f.open.MaxBackoff+time.Millisecond), c); len(acts) != 1 {
		t.Fatalf("not retried later: %v", acts)
	}
}

func TestIncrementalGrowsStepByStepOnDisjointPaths(t *testing.T) {
	p := NewIncremental(host)
	p.filter = ifaceFilter{Allow: []string{"eth0", "eth1", "eth2"}}
	// eth0 and eth1 share a link: the second subflow must go on eth2.
	p.SetShared([]string{"eth0", "eth1"})
	now := time.Unix(100, 0)
	initial := subflow(a1, 40000, b1, 1)
	c := conn(initial)
	c.RemoteAddrs = nil
	c.BytesSent = 150 << 10
	if acts := decideAt(p, now, c); len(acts) != 0 {
		t.Fatalf("opened a subflow below the first step: %v", acts)
	}
	c.BytesSent = 210 << 10
	acts := decideAt(p, now.Add(100*ms), c)
	if cr := count(acts, Create); len(cr) != 1 || cr["10.3.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("after the first step: %v, want one subflow from eth2 (eth1 shares eth0's link)", acts)
	}
	third := subflow(netip.MustParseAddr("10.3.0.1"), 50000, b1, 1)
	c = conn(initial, third)
	c.RemoteAddrs = nil
	c.BytesSent = 1 << 20
	if acts := decideAt(p, now.Add(200*ms), c); len(acts) != 0 {
		t.Fatalf("a third subflow before the second step: %v", acts)
	}
	c.BytesSent = 3 << 20
	if acts := decideAt(p, now.Add(300*ms), c); len(acts) != 0 {
		t.Fatalf("opened a subflow on eth1, which shares eth0's link: %v", acts)
	}
	if st := p.Status().([]IncrementalConnStatus); !strings.Contains(st[0].Waiting, "shares a link") {
		t.Fatalf("status %+v", st)
	}
	// Without the shared link, eth1 comes in at the second step.
	p.SetShared()
	if cr := count(decideAt(p, now.Add(400*ms), c), Create); cr["10.2.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("second step without shared links: %v", cr)
	}
}

func TestPathManagerPoliciesRefuseBadConfig(t *testing.T) {
	kernel := host
	kernel.PathManager = KernelPM
	cases := []struct {
		src  string
		env  Env
		want string
	}{
		{"{name: fullmesh, subflows_per_pair: 0}", host, `subflows_per_pair: "0" is not valid (a whole number from 1 to 32)`},
		{"{name: fullmesh, subflows_per_pair: 33}", host, "from 1 to 32"},
		{"{name: fullmesh, interfaces: [wlan9]}", host, `interfaces: "wlan9" is not an interface of this host (interfaces with an address: eth0, eth1, eth2)`},
		{"{name: fullmesh, interfaces: [eth0], exclude: [eth0]}", host, `exclude: "eth0" is both allowed (interfaces) and excluded`},
		{"{name: fullmesh}", kernel, "needs the userspace path manager"},
		{"{name: incremental}", kernel, "needs the userspace path manager"},
		{"{name: incremental, steps: [2MiB, 200KiB]}", host, "is not above the step before it"},
		{"{name: incremental, steps: [200]}", host, `size "200" has no unit`},
		{"{name: incremental, shared: [[eth0]]}", host, "needs at least two interfaces"},
		{"{name: fullmesh, backoff: 2s, max_backoff: 1s}", host, "max_backoff: 1s is below backoff 2s"},
	}
	for _, c := range cases {
		m, err := yamlcfg.Parse("c.yaml", []byte("p: "+c.src))
		if err != nil {
			t.Fatal(err)
		}
		Build(m.Map("p"), c.env)
		err = m.Err()
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "c.yaml:1: p.") {
			t.Errorf("%s: err = %v, want %q with file, line and key", c.src, err, c.want)
		}
	}
	// Fine when the host is not known (a scenario checked off the host).
	m, _ := yamlcfg.Parse("c.yaml", []byte("p: {name: fullmesh, subflows_per_pair: 8, interfaces: [a1, a2], shared: []}"))
	Build(m.Map("p"), Env{})
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), `unknown key "shared"`) {
		t.Fatalf("fullmesh has no shared key: %v", err)
	}
}

// Not every remote address is reachable from every local one: a pair that
// failed gives way to the next candidate instead of holding the step.
func TestIncrementalMovesOnFromAFailedPair(t *testing.T) {
	p := NewIncremental(host)
	p.filter = ifaceFilter{Allow: []string{"eth0", "eth1", "eth2"}}
	now := time.Unix(100, 0)
	c := conn(subflow(a1, 40000, b1, 1))
	c.RemoteAddrs = nil
	c.BytesSent = 300 << 10
	acts := decideAt(p, now, c)
	if cr := count(acts, Create); cr["10.2.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("first try %v, want eth1 (the allow list's order)", cr)
	}
	refused := Outcome{Action: acts[0], Result: Refused, Error: "mptcp_pm subflow-create: no route to host"}
	refused.Action.Policy = "incremental"
	acts = decideAt(p, now.Add(100*ms), c, refused)
	if cr := count(acts, Create); cr["10.3.0.1→10.101.0.2:5201"] != 1 {
		t.Fatalf("after eth1 failed: %v, want eth2 tried next", cr)
	}
}

// Before MPTCP is fully established the kernel refuses new subflows: none
// is asked for; and a batch refused together is one failure, not many.
func TestFullmeshWaitsForEstablishmentAndCountsABatchOnce(t *testing.T) {
	f := NewFullmesh(host)
	f.N = 4
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	c := conn(subflow(a1, 40000, b1, 1))
	c.RemoteAddrs = nil
	c.Established = false
	if acts := decideAt(f, now, c); len(acts) != 0 {
		t.Fatalf("actions before the connection is established: %v", acts)
	}
	c.Established = true
	acts := decideAt(f, now.Add(100*ms), c)
	var outs []Outcome
	for _, a := range acts {
		a.Policy = "fullmesh"
		outs = append(outs, Outcome{Action: a, Result: Refused, Error: "mptcp_pm subflow-create: no route"})
	}
	decideAt(f, now.Add(200*ms), c, outs...)
	st := f.Status().([]FullmeshConnStatus)
	if len(st) != 1 || len(st[0].Pairs) == 0 {
		t.Fatalf("status %+v, want the connection's pairs", st)
	}
	for _, p := range st[0].Pairs {
		if p.Failures != 1 {
			t.Fatalf("pair %s: %d failures after one refused batch, want 1", p.Pair, p.Failures)
		}
	}
}

// A connection stuck with data outstanding and nothing acknowledged gets
// one subflow closed (MPTCP then sends the outstanding data again on the
// others), once per timeout, not every round.
func TestFullmeshRescuesAStuckConnection(t *testing.T) {
	f := NewFullmesh(host)
	f.filter = ifaceFilter{Allow: []string{"eth0", "eth1"}}
	now := time.Unix(100, 0)
	one, two := subflow(a1, 40000, b1, 1), subflow(a2, 50000, b1, 1)
	two.LastAckRecv = 250 * ms
	c := conn(one, two)
	c.RemoteAddrs = nil
	c.BytesSent, c.BytesAcked = 5<<20, 4<<20
	decideAt(f, now, c)
	if d := count(decideAt(f, now.Add(400*ms), c), Destroy); len(d) != 0 {
		t.Fatalf("rescued before the timeout (500 ms): %v", d)
	}
	acts := decideAt(f, now.Add(600*ms), c)
	if d := count(acts, Destroy); d[ID(two).String()] != 1 || len(d) != 1 {
		t.Fatalf("stuck for 600 ms: destroys %v, want the subflow that heard from its peer longest ago", d)
	}
	if d := count(decideAt(f, now.Add(700*ms), c), Destroy); len(d) != 0 {
		t.Fatalf("rescued again in the next round: %v", d)
	}
	// Progress: nothing to do.
	c.BytesAcked += 1000
	if d := count(decideAt(f, now.Add(1300*ms), c), Destroy); len(d) != 0 {
		t.Fatalf("rescued a connection that moves: %v", d)
	}
}
