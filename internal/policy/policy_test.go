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

func backups(t *testing.T, ds []Decision) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, d := range ds {
		out[d.Subflow.Local.Addr().String()] = d.Backup
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
		"name: prefer\nk: 0.5":                `k: "0.5" is not valid`,
		"name: prefer\nrto_max: 200ms":        `rto_max: 200ms is outside what the kernel accepts`,
		"name: prefer\npaths: [\"a b\"]":      `is neither an IP address nor an interface name`,
		"name: prefer\nspeed: fast":           `unknown key "speed"`,
		"name: nosuch":                        `unknown policy "nosuch" (valid: dynthresh, prefer)`,
		"name: dynthresh\nprobe_interval: 0s": `probe_interval: must be above 0s`,
		"name: prefer\nprobe_interval: 1s":    `unknown key "probe_interval"`,
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

func TestDynThreshKeepsSymmetricSubflows(t *testing.T) {
	d := NewDynThresh()
	c := &clock{t: time.Unix(0, 0)}
	for i := 0; i < 100; i++ {
		// Noisy but equal: each ≈ 600 Mbit/s.
		cw := uint32(400 + (i%7)*15)
		ds := d.Decide(c.snap(sf("10.1.0.1", 1, 8*ms, cw), sf("10.2.0.1", 2, 8*ms, 860-cw)))
		for _, x := range ds {
			if x.Backup {
				t.Fatalf("step %d: symmetric subflow set aside: %+v", i, x)
			}
		}
		c.add(100 * ms)
	}
}

func TestDynThreshSetsAsideTheBadSubflow(t *testing.T) {
	d := NewDynThresh()
	d.Warmup, d.ProbeInterval, d.MaxProbeInterval, d.ProbeWindow = time.Second, time.Second, time.Second, 200*ms
	c := &clock{t: time.Unix(0, 0)}
	asideAt := time.Duration(-1)
	probes := 0
	for i := 0; i < 100; i++ {
		// Good: m between 500 and 700 Mbit/s; bad: ~7 Mbit/s (Table 1 #2).
		good := sf("10.1.0.1", 1, 8*ms, uint32(350+(i%5)*25))
		bad := sf("10.2.0.1", 2, 20*ms, 12)
		dec := backups(t, d.Decide(c.snap(good, bad)))
		if dec["10.1.0.1"] {
			t.Fatalf("step %d: the good subflow was set aside", i)
		}
		now := time.Duration(i) * 100 * ms
		if dec["10.2.0.1"] && asideAt < 0 {
			asideAt = now
		}
		if asideAt >= 0 && !dec["10.2.0.1"] {
			probes++
		}
		c.add(100 * ms)
	}
	if asideAt < time.Second || asideAt > 1500*ms {
		t.Fatalf("bad subflow set aside at %v, want right after the 1 s warm-up", asideAt)
	}
	// 8.5 s set aside, a probe every 1 s + window: some probe rounds, but
	// the bad subflow never came back for good.
	if probes < 10 || probes > 40 {
		t.Fatalf("%d probe samples, want a few per second", probes)
	}
}

func TestDynThreshTakesASubflowBackAfterAFlood(t *testing.T) {
	d := NewDynThresh()
	d.Warmup, d.ProbeWindow = time.Second, 200*ms
	c := &clock{t: time.Unix(0, 0)}
	var back time.Duration = -1
	for i := 0; i < 120; i++ {
		now := time.Duration(i) * 100 * ms
		a := sf("10.1.0.1", 1, 8*ms, 420)
		bcw := uint32(420)
		if now >= 3*time.Second && now < 6*time.Second {
			bcw = 20 // flooded: tiny cwnd, long queue
		}
		b := sf("10.2.0.1", 2, 8*ms, bcw)
		if now >= 3*time.Second && now < 6*time.Second {
			b.SRTT = 40 * ms
		}
		dec := backups(t, d.Decide(c.snap(a, b)))
		if now > 6*time.Second && !dec["10.2.0.1"] && back < 0 {
			back = now - 6*time.Second
		}
		c.add(100 * ms)
	}
	if back < 0 || back > 1500*ms {
		t.Fatalf("taken back %v after the flood, want within 1.5 s", back)
	}
}

func TestDynThreshWarmupProtectsAStartingSubflow(t *testing.T) {
	d := NewDynThresh()
	c := &clock{t: time.Unix(0, 0)}
	// A 400 ms-RTT subflow ramps up slowly; it must not be judged before
	// 10 of its RTTs (4 s).
	for i := 0; i < 35; i++ {
		far := sf("10.1.0.1", 1, 400*ms, uint32(10+i*10))
		near := sf("10.2.0.1", 2, 3*ms, 4)
		for _, x := range d.Decide(c.snap(far, near)) {
			if x.Backup && x.Subflow.Local.Addr().String() == "10.1.0.1" {
				t.Fatalf("at %v the far subflow was set aside during its warm-up", time.Duration(i)*100*ms)
			}
		}
		c.add(100 * ms)
	}
}

func TestEngineFirstPolicyWins(t *testing.T) {
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"})
	e := &Engine{Policies: []Policy{p, NewDynThresh()}}
	c := &clock{t: time.Unix(0, 0)}
	out := e.Decide(c.snap(sf("10.1.0.1", 1, 40*ms, 10), sf("10.2.0.1", 2, 40*ms, 10)))
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
	d := NewDynThresh()
	c := &clock{t: time.Unix(0, 0)}
	var starts []time.Duration
	prev := true
	for i := 0; i < 300; i++ {
		dec := backups(t, d.Decide(c.snap(sf("10.1.0.1", 1, 8*ms, uint32(350+(i%5)*25)), sf("10.2.0.1", 2, 20*ms, 12))))
		if !dec["10.2.0.1"] && prev && i > 0 {
			starts = append(starts, time.Duration(i)*100*ms)
		}
		prev = dec["10.2.0.1"]
		c.add(100 * ms)
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
