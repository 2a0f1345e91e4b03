package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

var remote = netip.MustParseAddrPort("10.1.0.2:5201")

// sf makes a subflow from local address a with an SRTT and cwnd; the
// port keeps subflows of one address apart.
func sf(a string, port uint16, srtt time.Duration, cwnd uint32) observe.Subflow {
	return observe.Subflow{Local: netip.AddrPortFrom(netip.MustParseAddr(a), port), Remote: remote,
		Token: 1, SRTT: srtt, Cwnd: cwnd, MSS: 1448, MPTCP: true, State: 1}
}

// clock is a fake clock for snapshots.
type clock struct{ t time.Time }

func (c *clock) snap(sfs ...observe.Subflow) *Snapshot {
	return &Snapshot{Now: c.t, Conns: []*Conn{{Token: 1, Subflows: sfs}}}
}
func (c *clock) add(d time.Duration) { c.t = c.t.Add(d) }

// backups maps each decided subflow's local address to its backup flag.
// A round with no decision at all fails the test: every check of the
// form "not backup" would pass on it.
func backups(t *testing.T, ds []Action) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, d := range ds {
		if d.Kind == Backup {
			out[d.Subflow.Local.Addr().String()] = d.Backup
		}
	}
	if len(out) == 0 {
		t.Fatalf("no backup decision in %v", ds)
	}
	return out
}

const ms = time.Millisecond

func TestPreferSameLatency(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	d := backups(t, p.Decide(c.snap(sf("10.1.0.1", 1, 40*ms, 10), sf("10.2.0.1", 2, 40*ms, 10))))
	if d["10.2.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("decisions %v: want the preferred 10.2.0.1 active and 10.1.0.1 backup", d)
	}
}

func TestPreferToleratesLatencyBelowDelta(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	// 60 ms ≤ δ = 2·40 ms: still preferred (paper Fig. 11).
	d := backups(t, p.Decide(c.snap(sf("10.1.0.1", 1, 40*ms, 10), sf("10.2.0.1", 2, 60*ms, 10))))
	if d["10.2.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("60ms vs 40ms: %v, want preferred active", d)
	}
}

func TestPreferFallsBackAboveDeltaAndComesBack(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	slow := sf("10.2.0.1", 2, 200*ms, 10) // above δ = 80 ms (Fig. 12)
	fast := sf("10.1.0.1", 1, 40*ms, 10)
	d := backups(t, p.Decide(c.snap(fast, slow)))
	if d["10.1.0.1"] || d["10.2.0.1"] {
		t.Fatalf("200ms vs 40ms: %v, want the kernel's default (both usable)", d)
	}
	// Still used by the kernel, it keeps being measured: at 50 ms it is
	// viable again.
	slow.SRTT = 50 * ms
	c.add(100 * ms)
	if d := backups(t, p.Decide(c.snap(fast, slow))); d["10.2.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("after recovery: %v, want preferred again", d)
	}
}

func TestPreferStallAndRecovery(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	other := sf("10.1.0.1", 1, 80*ms, 10)
	pref := sf("10.2.0.1", 2, 80*ms, 10)
	if d := backups(t, p.Decide(c.snap(other, pref))); d["10.2.0.1"] {
		t.Fatal("not preferred at start")
	}
	// The link dies: data outstanding, no ACK for longer than δ = 160 ms.
	pref.Unacked, pref.LastAckRecv = 30, 200*ms
	c.add(100 * ms)
	d := backups(t, p.Decide(c.snap(other, pref)))
	if !d["10.2.0.1"] || d["10.1.0.1"] {
		t.Fatalf("stalled: %v, want the other path active and the preferred one backup", d)
	}
	// A stalled subflow stays out of the way (the RTO probes it).
	pref.Backoff, pref.LastAckRecv = 3, 2*time.Second
	for i := 0; i < 30; i++ {
		c.add(100 * ms)
		if d := backups(t, p.Decide(c.snap(other, pref))); !d["10.2.0.1"] {
			t.Fatalf("stalled subflow made usable at step %d", i)
		}
	}
	// An ACK arrives: backoff cleared, fresh ACK.
	pref.Backoff, pref.Unacked, pref.LastAckRecv = 0, 5, 2*ms
	c.add(100 * ms)
	if d := backups(t, p.Decide(c.snap(other, pref))); d["10.2.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("after recovery: %v", d)
	}
	st := p.Status().(PreferStatus)
	if len(st.Conns) != 1 || st.Conns[0].Switches != 3 {
		t.Fatalf("status %+v, want 3 switches (on, off, on)", st)
	}
}

func TestPreferOrderAndInterfaces(t *testing.T) {
	env := Env{Addrs: func(name string) ([]netip.Addr, bool) {
		if name == "wifi" {
			return []netip.Addr{netip.MustParseAddr("10.2.0.1")}, true
		}
		return nil, false
	}}
	p := NewPrefer(env)
	p.SetTargets([]string{"wifi", "10.3.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	a, b, cc := sf("10.1.0.1", 1, 40*ms, 10), sf("10.2.0.1", 2, 40*ms, 10), sf("10.3.0.1", 3, 40*ms, 10)
	d := backups(t, p.Decide(c.snap(a, b, cc)))
	if d["10.2.0.1"] || !d["10.3.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("order wifi first: %v", d)
	}
	// The first choice stalls: the second preferred path takes over.
	b.Unacked, b.LastAckRecv = 10, time.Second
	d = backups(t, p.Decide(c.snap(a, b, cc)))
	if d["10.3.0.1"] || !d["10.2.0.1"] || !d["10.1.0.1"] {
		t.Fatalf("wifi stalled: %v, want 10.3.0.1 to carry the data", d)
	}
	// No hint, no opinion.
	p.SetTargets(nil)
	if ds := p.Decide(c.snap(a, b, cc)); len(ds) != 0 {
		t.Fatalf("without a hint: %v", ds)
	}
	if err := p.SetTargets([]string{"not an iface!"}); err == nil {
		t.Fatal("a bad target was accepted")
	}
}

func TestPreferRequirements(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	r := p.Requirements()
	if r.RTOMax[netip.MustParseAddr("10.2.0.1")] != time.Second {
		t.Fatalf("requirements %+v, want rto_max 1s on the preferred address", r)
	}
}

func TestBuildRejectsBadConfig(t *testing.T) {
	cases := map[string]string{
		"name: prefer\nk: 0.5":                             `k: "0.5" is not valid`,
		"name: prefer\nrto_max: 200ms":                     `rto_max: 200ms is outside what the kernel accepts`,
		"name: prefer\npaths: [\"a b\"]":                   `is neither an IP address nor an interface name`,
		"name: prefer\nspeed: fast":                        `unknown key "speed"`,
		"name: nosuch":                                     `unknown policy "nosuch" (valid: backup, coupled, dynthresh, ecf, fullmesh, incremental, limit, prefer, `,
		"name: dynthresh\nmode: paper\nprobe_interval: 0s": `probe_interval: must be above 0s`,
		"name: prefer\nprobe_interval: 5ms":                `probe_interval: 5ms is below 10ms`,
		"name: ecf\ntrial_rtts: 0.5":                       `c.yaml:2: trial_rtts: "0.5" is not valid (a number from 1 to 1000)`,
	}
	for src, want := range cases {
		m, err := yamlcfg.Parse("c.yaml", []byte(src))
		if err != nil {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%q: parse error %v", src, err)
			}
			continue
		}
		Build(m, Env{})
		if err := m.Err(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

// mustBuild builds the policy of one config entry, failing the test on
// a config error.
func mustBuild(t *testing.T, src string, env Env) Policy {
	t.Helper()
	m, err := yamlcfg.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := Build(m, env)
	if err := m.Err(); err != nil {
		t.Fatalf("%q: %v", src, err)
	}
	return p
}

// sim is a connection for dynthresh tests: every 100 ms each subflow
// acknowledges rate[i] bytes per second and the connection (in order)
// acknowledges agg bytes per second.
type sim struct {
	t    *testing.T
	c    *clock
	sfs  []observe.Subflow
	conn uint64
}

func newSim(t *testing.T, sfs ...observe.Subflow) *sim {
	for i := range sfs {
		sfs[i].LocalID = uint8(i) // the first is the initial subflow
	}
	return &sim{t: t, c: &clock{t: time.Unix(0, 0)}, sfs: sfs}
}

func (s *sim) step(d *DynThresh, agg float64, rates ...float64) map[string]bool {
	s.c.add(100 * ms)
	for i := range s.sfs {
		s.sfs[i].BytesAcked += uint64(rates[i] / 10)
	}
	s.conn += uint64(agg / 10)
	out := map[string]bool{}
	for _, x := range d.Decide(&Snapshot{Now: s.c.t, Conns: []*Conn{{Token: 1, Subflows: s.sfs, BytesAcked: s.conn}}}) {
		out[x.Subflow.Local.Addr().String()] = x.Backup
	}
	// dynthresh decides every subflow every round: a missing decision
	// would pass every "not set aside" check.
	if len(out) != len(s.sfs) {
		s.t.Fatalf("at %v: decisions %v, want one per subflow (%d)", s.c.t, out, len(s.sfs))
	}
	return out
}

const mbps = 1e6 / 8 // bytes per second in one Mbit/s

func TestDynThreshKeepsSymmetricSubflows(t *testing.T) {
	d := paperDynThresh()
	s := newSim(t, sf("10.1.0.1", 1, 8*ms, 400), sf("10.2.0.1", 2, 8*ms, 400))
	for i := 0; i < 100; i++ {
		// Noisy but equal, 380 ± 60 Mbit/s each; the aggregate is both.
		a, b := (380+float64(i%7*20-60))*mbps, (380-float64(i%5*30-60))*mbps
		for addr, backup := range s.step(d, a+b, a, b) {
			if backup {
				t.Fatalf("step %d: symmetric subflow %s set aside", i, addr)
			}
		}
	}
}

func TestDynThreshSetsAsideTheBadSubflow(t *testing.T) {
	d := paperDynThresh()
	d.MaxProbeInterval = time.Second
	s := newSim(t, sf("10.1.0.1", 1, 8*ms, 400), sf("10.2.0.1", 2, 20*ms, 12))
	asideAt := time.Duration(-1)
	probes := 0
	for i := 0; i < 100; i++ {
		now := time.Duration(i+1) * 100 * ms
		// The bad path drags the connection to 250 Mbit/s (Table 1 #2)
		// while the good subflow alone once showed 380.
		good, agg := 380*mbps, 250*mbps
		dec := s.step(d, agg, good, 4*mbps)
		if dec["10.1.0.1"] {
			t.Fatalf("at %v the good subflow was set aside", now)
		}
		if dec["10.2.0.1"] && asideAt < 0 {
			asideAt = now
		}
		if asideAt >= 0 && !dec["10.2.0.1"] {
			probes++
		}
	}
	if asideAt < 0 || asideAt > time.Second {
		t.Fatalf("bad subflow set aside at %v, want within the first second", asideAt)
	}
	if probes < 10 || probes > 40 {
		t.Fatalf("%d probe samples, want a few per second", probes)
	}
}

func TestDynThreshTakesASubflowBackAfterAFlood(t *testing.T) {
	d := paperDynThresh()
	s := newSim(t, sf("10.1.0.1", 1, 8*ms, 400), sf("10.2.0.1", 2, 8*ms, 400))
	var aside, back time.Duration = -1, -1
	for i := 0; i < 120; i++ {
		now := time.Duration(i+1) * 100 * ms
		a, b := 380*mbps, 380*mbps
		agg := a + b
		flooded := now >= 3*time.Second && now < 6*time.Second
		if flooded {
			b, agg = 20*mbps, 200*mbps // the flood starves b and stalls the connection
		}
		dec := s.step(d, agg, a, b)
		if flooded && dec["10.2.0.1"] && aside < 0 {
			aside = now
		}
		if now > 6*time.Second && !dec["10.2.0.1"] && back < 0 {
			back = now - 6*time.Second
		}
	}
	if aside < 3*time.Second || aside > 4*time.Second {
		t.Fatalf("set aside at %v, want soon after the flood began (3 s)", aside)
	}
	if back < 0 || back > 2*time.Second {
		t.Fatalf("taken back %v after the flood, want within 2 s", back)
	}
}

func TestDynThreshWarmupProtectsTheInitialSubflow(t *testing.T) {
	d := paperDynThresh()
	// The initial subflow crosses a 400 ms path and ramps up slowly; the
	// joined one is near but slow (Table 1 #5). The far one must not be
	// set aside during its warm-up (10 RTTs): the near one goes instead.
	s := newSim(t, sf("10.1.0.1", 1, 400*ms, 10), sf("10.2.0.1", 2, 20*ms, 4))
	var nearAside bool
	for i := 0; i < 35; i++ {
		s.sfs[0].Cwnd = uint32(10 + i*10)
		dec := s.step(d, 2*mbps, float64(i)*mbps/4, 4*mbps)
		if dec["10.1.0.1"] {
			t.Fatalf("at %v the far initial subflow was set aside during its warm-up", time.Duration(i)*100*ms)
		}
		nearAside = nearAside || dec["10.2.0.1"]
	}
	if !nearAside {
		t.Fatal("the near, slow subflow was never set aside")
	}
}

func TestDynThreshEstimateIsThePapersRule(t *testing.T) {
	d := paperDynThresh()
	d.Metric = "estimate"
	s := newSim(t, sf("10.1.0.1", 1, 8*ms, 500), sf("10.2.0.1", 2, 20*ms, 12))
	aside := false
	for i := 0; i < 20; i++ {
		// m of the good subflow dips below its best: Σm < best m.
		s.sfs[0].Cwnd = uint32(500 - (i%2)*100)
		dec := s.step(d, 0, 0, 0)
		aside = aside || dec["10.2.0.1"]
	}
	if !aside {
		t.Fatal("Σm below the best m did not set the bad subflow aside")
	}
}

func TestEngineFirstPolicyWins(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	e := &Engine{Policies: []Policy{p, paperDynThresh()}}
	c := &clock{t: time.Unix(0, 0)}
	out := e.Decide(c.snap(sf("10.1.0.1", 1, 40*ms, 10), sf("10.2.0.1", 2, 40*ms, 10))).Backup
	if len(out) != 2 {
		t.Fatalf("decisions %v", out)
	}
	for _, d := range out {
		if d.Policy != "prefer" {
			t.Fatalf("decision by %s, want prefer (first in order)", d.Policy)
		}
	}
}

func TestPreferRTTWindowIgnoresSelfInflictedQueueing(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	other := sf("10.1.0.1", 1, 80*ms, 10)
	pref := sf("10.2.0.1", 2, 80*ms, 10)
	// Carrying everything, the preferred path's SRTT swings up to 2.5×
	// its base with its own queue: still preferred.
	for i := 0; i < 50; i++ {
		pref.SRTT = time.Duration(80+(i%10)*12) * ms
		if d := backups(t, p.Decide(c.snap(other, pref))); d["10.2.0.1"] {
			t.Fatalf("step %d (srtt %v): preference dropped for a queue of its own", i, pref.SRTT)
		}
		c.add(100 * ms)
	}
	// A real change: the path's latency becomes 250 ms for good. It shows
	// once the window (5 s) has forgotten the old samples: the other path
	// stops being a backup.
	var off time.Duration = -1
	for i := 0; i < 80; i++ {
		pref.SRTT = 250 * ms
		if d := backups(t, p.Decide(c.snap(other, pref))); !d["10.1.0.1"] && off < 0 {
			off = time.Duration(i) * 100 * ms
		}
		c.add(100 * ms)
	}
	if off < 4*time.Second || off > 6*time.Second {
		t.Fatalf("latency increase acted on after %v, want after the 5 s window", off)
	}
	// The paper's literal rule (window 0) reacts to the first sample.
	q := NewPrefer(Env{})
	q.SetTargets([]string{"10.2.0.1"})
	q.RTTWindow = 0
	pref.SRTT = 200 * ms
	if d := backups(t, q.Decide(c.snap(other, pref))); d["10.1.0.1"] {
		t.Fatalf("window 0: %v, want the preference dropped at once", d)
	}
}

func TestDynThreshBacksOffFailedProbes(t *testing.T) {
	d := paperDynThresh()
	s := newSim(t, sf("10.1.0.1", 1, 8*ms, 400), sf("10.2.0.1", 2, 20*ms, 12))
	var starts []time.Duration
	prev := true
	for i := 0; i < 300; i++ {
		dec := s.step(d, 250*mbps, 380*mbps, 4*mbps)
		if !dec["10.2.0.1"] && prev && i > 0 {
			starts = append(starts, time.Duration(i)*100*ms)
		}
		prev = dec["10.2.0.1"]
	}
	// Set aside at 0.2 s; probes after 1, 2, 4, 8, 8 … seconds.
	if len(starts) < 4 {
		t.Fatalf("probe starts %v", starts)
	}
	for i := 1; i < len(starts); i++ {
		gap := starts[i] - starts[i-1]
		if i < 4 && (gap < time.Duration(1<<i)*time.Second || gap > time.Duration(1<<i)*time.Second+600*ms) {
			t.Fatalf("probe starts %v: gap %d is %v, want about %v", starts, i, gap, time.Duration(1<<i)*time.Second)
		}
	}
}

func TestDynThreshNeverSetsAsideTheGoodPathForALateJoiner(t *testing.T) {
	d := paperDynThresh()
	// The good initial subflow runs alone for a second, then a far, slow
	// subflow joins and the aggregate collapses (Table 1 #4). The joiner
	// must go, the good path must stay, whatever the joiner's age.
	s := newSim(t, sf("10.1.0.1", 1, 5*ms, 400))
	for i := 0; i < 10; i++ {
		s.step(d, 380*mbps, 380*mbps)
	}
	s.sfs = append(s.sfs, sf("10.2.0.1", 2, 400*ms, 10))
	s.sfs[1].LocalID = 1
	asideBad := false
	for i := 0; i < 50; i++ {
		dec := s.step(d, 4*mbps, 0, 4*mbps) // HoL: nothing moves but the slow path
		if dec["10.1.0.1"] {
			t.Fatalf("step %d: the good path was set aside", i)
		}
		asideBad = asideBad || dec["10.2.0.1"]
	}
	if !asideBad {
		t.Fatal("the slow joiner was never set aside")
	}
}

// paperDynThresh is dynthresh running the paper's rule (mode: paper).
func paperDynThresh() *DynThresh {
	d := NewDynThresh()
	d.Mode = "paper"
	return d
}

// A round without the quiet connections (Snapshot.Quiet) keeps what
// prefer knows of them: their state, their RTT windows and their part of
// the status; a connection neither decided nor quiet is forgotten.
func TestPreferKeepsQuietConnections(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	c := &clock{t: time.Unix(0, 0)}
	two := func(tok uint32, port uint16) *Conn {
		a, b := sf("10.1.0.1", port, 40*ms, 10), sf("10.2.0.1", port+1, 40*ms, 10)
		a.Token, b.Token = tok, tok
		return &Conn{Token: tok, Subflows: []observe.Subflow{a, b}}
	}
	p.Decide(&Snapshot{Now: c.t, Conns: []*Conn{two(1, 10), two(2, 20)}})
	for i := 0; i < 12; i++ { // past the rounds that tidy up
		c.add(100 * ms)
		p.Decide(&Snapshot{Now: c.t, Conns: []*Conn{two(1, 10)}, Quiet: map[uint32]bool{2: true}})
	}
	st := p.Status().(PreferStatus)
	if len(st.Conns) != 2 || p.conns[2] == nil || len(p.rtts) != 4 {
		t.Fatalf("status %d connections, state of 2: %v, %d RTT windows; want 2 connections, 2 kept, 4 windows", len(st.Conns), p.conns[2], len(p.rtts))
	}
	for i := 0; i < 10; i++ {
		c.add(100 * ms)
		p.Decide(&Snapshot{Now: c.t, Conns: []*Conn{two(1, 10)}, Quiet: map[uint32]bool{}})
	}
	if st := p.Status().(PreferStatus); len(st.Conns) != 1 || p.conns[2] != nil || len(p.rtts) != 2 {
		t.Fatalf("after 2 went: status %d connections, %d RTT windows; want 1 and 2", len(st.Conns), len(p.rtts))
	}
}
