package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// probeWorld is a client connection under the userspace path manager: the
// preferred wifi (the connection's own address) and cell.
type probeWorld struct {
	clock
	ifaces map[string][]netip.Addr
	p      *Prefer
	conn   *Conn
}

var (
	wifiAddr = netip.MustParseAddr("10.1.0.1")
	cellAddr = netip.MustParseAddr("10.2.0.1")
)

func newProbeWorld(t *testing.T) *probeWorld {
	w := &probeWorld{clock: clock{t: time.Unix(0, 0)}, ifaces: map[string][]netip.Addr{"wifi": {wifiAddr}, "cell": {cellAddr}}}
	env := Env{PathManager: UserspacePM,
		Addrs:      func(n string) ([]netip.Addr, bool) { a, ok := w.ifaces[n]; return a, ok },
		Interfaces: func() map[string][]netip.Addr { return w.ifaces }}
	w.p = NewPrefer(env)
	// One probe per round of 100 ms, at most 10 (the rounds below step by
	// 100 ms; the defaults are 25 ms and 32).
	w.p.ProbeInterval, w.p.MaxProbes = 100*ms, 10
	if err := w.p.SetTargets([]string{"wifi"}); err != nil {
		t.Fatal(err)
	}
	w.conn = &Conn{Token: 1, Established: true, Local: netip.AddrPortFrom(wifiAddr, 1), Remote: remote,
		Subflows: []observe.Subflow{sf("10.1.0.1", 1, 80*ms, 10), sf("10.2.0.1", 2, 80*ms, 10)}}
	return w
}

func (w *probeWorld) decide() []Action {
	return w.p.Decide(&Snapshot{Now: w.t, Conns: []*Conn{w.conn}})
}

func kinds(acts []Action, k Kind) []Action {
	var out []Action
	for _, a := range acts {
		if a.Kind == k {
			out = append(out, a)
		}
	}
	return out
}

func TestPreferProbesASilentPreferredPathAndReturnsWhenItAnswers(t *testing.T) {
	w := newProbeWorld(t)
	if acts := w.decide(); len(kinds(acts, Create))+len(kinds(acts, Destroy)) != 0 {
		t.Fatalf("healthy: lifecycle actions %v", acts)
	}
	// The wifi goes silent: data outstanding, no ACK, an RTO pending.
	stalled := &w.conn.Subflows[0]
	stalled.Unacked, stalled.LastAckRecv, stalled.Backoff = 30, 300*ms, 1
	var pending []observe.Subflow
	for i := 0; i < 25; i++ {
		w.add(100 * ms)
		w.conn.Pending = pending
		acts := w.decide()
		if d := kinds(acts, Destroy); len(d) != 0 {
			t.Fatalf("round %d: %v closed while the path is silent (closing any subflow makes the kernel send the whole window again)", i, d)
		}
		cr := kinds(acts, Create)
		switch {
		case i < 10 && len(cr) != 1:
			t.Fatalf("round %d: creations %v, want one probe per interval", i, cr)
		case i >= 10 && len(cr) != 0:
			t.Fatalf("round %d: creations %v with 10 probes under way", i, cr)
		}
		for _, a := range cr {
			if a.Subflow.Local.Addr() != wifiAddr || a.Subflow.Remote.AddrPort() != remote || a.Iface != "wifi" {
				t.Fatalf("probe %+v, want one from wifi to the connection's peer", a)
			}
			probe := sf("10.1.0.1", uint16(100+i), 0, 10)
			probe.State = 2 // SYN sent
			pending = append(pending, probe)
		}
		if d := backups(t, kinds(acts, Backup)); !d["10.1.0.1"] || d["10.2.0.1"] {
			t.Fatalf("round %d: backup decisions %v, want cell carrying the data", i, d)
		}
		if r := w.p.Requirements(); r.SynRTO[wifiAddr] != 20*ms {
			t.Fatalf("round %d: SYN timeouts %v, want 20ms on the probed address", i, r.SynRTO)
		}
	}
	// The path answers: probe 103 is established.
	w.add(100 * ms)
	answered := pending[3]
	answered.State, answered.SRTT = 1, 80*ms
	w.conn.Pending = append(append([]observe.Subflow(nil), pending[:3]...), pending[4:]...)
	w.conn.Subflows = append(w.conn.Subflows, answered)
	acts := w.decide()
	closed := map[SubflowID]bool{}
	for _, a := range kinds(acts, Destroy) {
		closed[a.Subflow] = true
	}
	if !closed[ID(*stalled)] || len(closed) != 10 || closed[ID(answered)] {
		t.Fatalf("closed %v: want the stalled subflow and the 9 other probes, not the one that answered", closed)
	}
	if len(kinds(acts, Backup)) == 0 {
		t.Fatalf("no backup decision once the probe answered: %v", acts)
	}
	for _, a := range kinds(acts, Backup) {
		want := a.Subflow != ID(answered)
		if a.Backup != want {
			t.Fatalf("%v backup=%v, want the answered probe to carry the data", a.Subflow, a.Backup)
		}
	}
	if len(kinds(acts, Create)) != 0 || len(w.p.Requirements().SynRTO) != 0 {
		t.Fatalf("still probing after the path answered: %v", acts)
	}
	// Once the closed ones are gone, nothing more happens.
	w.add(100 * ms)
	w.conn.Pending, w.conn.Subflows = nil, []observe.Subflow{w.conn.Subflows[1], answered}
	if acts := w.decide(); len(kinds(acts, Create))+len(kinds(acts, Destroy)) != 0 {
		t.Fatalf("after the return: %v", acts)
	}
}

func TestPreferRecoveredSubflowEndsProbing(t *testing.T) {
	w := newProbeWorld(t)
	w.decide()
	w.conn.Subflows[0].Unacked, w.conn.Subflows[0].LastAckRecv = 30, 400*ms
	w.add(100 * ms)
	cr := kinds(w.decide(), Create)
	if len(cr) != 1 {
		t.Fatalf("no probe: %v", cr)
	}
	probe := sf("10.1.0.1", 7, 0, 10)
	probe.State = 2
	w.conn.Pending = []observe.Subflow{probe}
	// Its retransmission got through: the old subflow is fine again.
	w.conn.Subflows[0].Unacked, w.conn.Subflows[0].LastAckRecv = 3, 5*ms
	w.add(100 * ms)
	d := kinds(w.decide(), Destroy)
	if len(d) != 1 || d[0].Subflow != ID(probe) {
		t.Fatalf("closed %v, want only the probe", d)
	}
}

func TestPreferClosesASubflowWhoseAddressIsGoneAndProbesWhenItIsBack(t *testing.T) {
	w := newProbeWorld(t)
	w.decide()
	// The wifi interface goes down: its address is removed.
	w.ifaces["wifi"] = nil
	w.add(100 * ms)
	d := kinds(w.decide(), Destroy)
	if len(d) != 1 || d[0].Subflow.Local.Addr() != wifiAddr || !strings.Contains(d[0].Reason, "is gone") {
		t.Fatalf("closed %v, want the wifi subflow closed at once", d)
	}
	w.add(100 * ms)
	if acts := w.decide(); len(kinds(acts, Destroy))+len(kinds(acts, Create)) != 0 {
		t.Fatalf("asked again, or probed an address that is not there: %v", acts)
	}
	// The kernel closed it; the interface comes back.
	w.conn.Subflows = w.conn.Subflows[1:]
	w.ifaces["wifi"] = []netip.Addr{wifiAddr}
	w.add(20 * ms) // an address event, not a full interval later
	cr := kinds(w.decide(), Create)
	if len(cr) != 1 || cr[0].Subflow.Local.Addr() != wifiAddr {
		t.Fatalf("creations %v, want a probe from wifi at once", cr)
	}
}

func TestPreferOpensTheOtherSubflowsUnderTheUserspacePM(t *testing.T) {
	w := newProbeWorld(t)
	w.conn.Subflows = w.conn.Subflows[:1] // only the initial subflow, on wifi
	cr := kinds(w.decide(), Create)
	if len(cr) != 1 || cr[0].Subflow.Local.Addr() != cellAddr {
		t.Fatalf("creations %v, want one subflow from cell", cr)
	}
}

// Under the kernel path manager prefer opens no subflow itself (its fast
// return re-adds endpoints: prefer_reopen_test.go).
func TestPreferKernelPMCreatesNoSubflows(t *testing.T) {
	p := NewPrefer(Env{PathManager: KernelPM})
	p.SetTargets([]string{"10.1.0.1"})
	pref := sf("10.1.0.1", 1, 80*ms, 10)
	pref.Unacked, pref.LastAckRecv, pref.Backoff = 30, time.Second, 2
	c := &Conn{Token: 1, Established: true, Remote: remote, Subflows: []observe.Subflow{pref, sf("10.2.0.1", 2, 80*ms, 10)}}
	if acts := p.Decide(&Snapshot{Now: time.Unix(1, 0), Conns: []*Conn{c}}); len(kinds(acts, Create)) != 0 {
		t.Fatalf("kernel path manager: %v", acts)
	}
}

func TestPreferAvoidInitial(t *testing.T) {
	ifaces := map[string][]netip.Addr{"wifi": {wifiAddr}, "cell": {cellAddr}}
	env := Env{Interfaces: func() map[string][]netip.Addr { return ifaces },
		Addrs: func(n string) ([]netip.Addr, bool) { a, ok := ifaces[n]; return a, ok }}
	build := func(src string) *Prefer {
		m, err := yamlcfg.Parse("c.yaml", []byte(src))
		if err != nil {
			t.Fatal(err)
		}
		p := Build(m, env)
		if err := m.Err(); err != nil {
			t.Fatal(err)
		}
		return p.(*Prefer)
	}
	// The user prefers wifi and marks cell volatile: connections start on wifi.
	r := build("name: prefer\npaths: [wifi]\navoid_initial: [cell]").Requirements()
	if r.InitialAddr != wifiAddr || len(r.InitialAvoid) != 1 || r.InitialAvoid[0] != cellAddr {
		t.Fatalf("requirements %+v, want initial subflows from wifi", r)
	}
	// The paper: the preferred ad-hoc path is the volatile one; connections
	// start on the other.
	r = build("name: prefer\npaths: [wifi]\navoid_initial: [wifi]").Requirements()
	if r.InitialAddr != cellAddr {
		t.Fatalf("requirements %+v, want initial subflows from cell", r)
	}
	// Everything volatile: nowhere to start from but where routing says.
	r = build("name: prefer\npaths: [wifi]\navoid_initial: [wifi, cell]").Requirements()
	if r.InitialAddr.IsValid() || len(r.InitialAvoid) != 2 {
		t.Fatalf("requirements %+v, want no address", r)
	}
	if r := build("name: prefer\npaths: [wifi]").Requirements(); len(r.InitialAvoid) != 0 || r.InitialAddr.IsValid() {
		t.Fatalf("without avoid_initial: %+v", r)
	}
}

func TestPreferProbeConfigErrors(t *testing.T) {
	cases := []struct {
		src, want string
		pm        string
	}{
		{"name: prefer\nprobe_interval: 5ms", "probe_interval: 5ms is below 10ms", KernelPM},
		{"name: prefer\nprobe_interval: 100", `probe_interval`, UserspacePM},
		{"name: prefer\nprobe_interval: -1s", "probe_interval", UserspacePM},
		{"name: prefer\nmax_probes: 0", "max_probes", UserspacePM},
		{"name: prefer\nnotsent_lowat: 2GiB", "notsent_lowat: 2GiB is outside", UserspacePM},
		{"name: prefer\navoid_initial: [\"a b\"]", "avoid_initial", KernelPM},
	}
	for _, c := range cases {
		m, err := yamlcfg.Parse("c.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		Build(m, Env{PathManager: c.pm})
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: error %v, want it to say %q", c.src, err, c.want)
		}
	}
	// probe_interval: 0s is fine anywhere.
	m, _ := yamlcfg.Parse("c.yaml", []byte("name: prefer\nprobe_interval: 0s"))
	Build(m, Env{PathManager: KernelPM})
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
}

func TestPreferLeavesOpeningSubflowsToOthersWhenAsked(t *testing.T) {
	env := Env{PathManager: UserspacePM}
	for src, mesh := range map[string]bool{"name: prefer\npaths: [10.1.0.1]": true, "name: prefer\npaths: [10.1.0.1]\nopen_subflows: false": false} {
		p := mustBuild(t, src, env).(*Prefer)
		if got := p.mesh != nil && p.ProbeInterval > 0; got != mesh {
			t.Errorf("%q: opens subflows and probes %v, want %v", src, got, mesh)
		}
	}
	m, _ := yamlcfg.Parse("c.yaml", []byte("name: prefer\npaths: [10.1.0.1]\nopen_subflows: false\nprobe_interval: 100ms"))
	Build(m, env)
	if err := m.Err(); err == nil || !strings.Contains(err.Error(), "open_subflows: false") {
		t.Fatalf("probes without opening subflows: %v, want an error naming open_subflows", err)
	}
}
