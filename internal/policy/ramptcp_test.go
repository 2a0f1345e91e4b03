package policy

import (
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// Two paths: the initial subflow (ids 0→0) and one from 10.2.0.1 (1→0).
func rampSubflows() []observe.Subflow {
	a := sf("10.1.0.1", 1, 20*ms, 10)
	b := sf("10.2.0.1", 2, 20*ms, 10)
	b.LocalID = 1
	return []observe.Subflow{a, b}
}

func report(local uint8, at time.Time, loss float64, lastHop float64) PathHealth {
	h := PathHealth{LocalID: local, Received: at, Reports: 1}
	if loss >= 0 {
		h.Loss, h.LossKnown = loss, true
	}
	if lastHop >= 0 {
		h.LastHop, h.LastHopKnown = lastHop, true
	}
	return h
}

func testRAMPTCP() *RAMPTCP {
	r := NewRAMPTCP()
	r.Warmup = 0
	return r
}

func rampSnap(c *clock, hs ...PathHealth) *Snapshot {
	s := c.snap(rampSubflows()...)
	s.Conns[0].Health = hs
	return s
}

func TestRAMPTCPMarksABadPathInactive(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	// Both healthy: both active.
	d := backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.01, -1))))
	if d["10.1.0.1"] || d["10.2.0.1"] {
		t.Fatalf("healthy paths: %v, want both active", d)
	}
	// The receiver reports 15% loss on path 2: inactive at once.
	c.add(10 * ms)
	d = backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.15, -1))))
	if d["10.1.0.1"] || !d["10.2.0.1"] {
		t.Fatalf("15%% loss on path 2: %v, want it backup and path 1 active", d)
	}
	// Or a bad last hop with no transport loss known (idle path).
	r2 := testRAMPTCP()
	d = backups(t, r2.Decide(rampSnap(c, report(0, c.t, 0, 1), report(1, c.t, -1, 0.8))))
	if !d["10.2.0.1"] {
		t.Fatalf("last hop at 80%%: %v, want path 2 backup", d)
	}
}

// Intermittent loss does not make a path flap: it stays inactive for the
// hold, a failed probe doubles the hold, and it comes back only when a
// probe brings good reports.
func TestRAMPTCPHysteresis(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	good := func() []PathHealth { return []PathHealth{report(0, c.t, 0, -1), report(1, c.t, 0, -1)} }
	bad := func() []PathHealth { return []PathHealth{report(0, c.t, 0, -1), report(1, c.t, 0.2, -1)} }
	step := func(hs func() []PathHealth) bool {
		c.add(50 * ms)
		return backups(t, r.Decide(rampSnap(c, hs()...)))["10.2.0.1"]
	}
	if !step(bad) {
		t.Fatal("not inactive on a bad report")
	}
	// Good reports (an intermittent pause of the loss) during the hold:
	// it stays inactive.
	for i := 0; i < 15; i++ {
		if !step(good) {
			t.Fatalf("active again %v after going inactive, within the hold", time.Duration(i+1)*50*ms)
		}
	}
	// Hold over (1s): a probe (usable again).
	for i := 0; i < 6 && step(good); i++ {
	}
	if step(bad) != true {
		t.Fatal("a bad report during the probe must end it")
	}
	st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]
	if st.HoldMs != 2000 || st.Probes != 1 {
		t.Fatalf("after a failed probe: %+v, want hold 2s and one probe", st)
	}
	// Inactive for the doubled hold, even with good reports.
	for i := 0; i < 39; i++ {
		if !step(good) {
			t.Fatalf("active again %v into a 2s hold", time.Duration(i+1)*50*ms)
		}
	}
	// The next probe brings good reports for its whole window: active.
	active := false
	for i := 0; i < 12; i++ {
		if !step(good) {
			active = true
		}
	}
	if !active || step(good) {
		t.Fatal("a good probe did not bring the path back")
	}
	if st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]; st.State != "active" || st.HoldMs != 1000 {
		t.Fatalf("after a good probe: %+v, want active with the hold reset", st)
	}
}

// Both paths bad: the healthiest stays active.
func TestRAMPTCPKeepsOnePath(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	acts := r.Decide(rampSnap(c, report(0, c.t, 0.3, -1), report(1, c.t, 0.1, -1)))
	d := backups(t, acts)
	if !d["10.1.0.1"] || d["10.2.0.1"] {
		t.Fatalf("both bad: %v, want the less bad (path 2) active", d)
	}
	for _, a := range acts {
		if !a.Backup && !strings.Contains(a.Reason, "single-path") {
			t.Fatalf("reason %q does not say why", a.Reason)
		}
	}
	// A connection with one subflow is never set aside.
	s := c.snap(rampSubflows()[0])
	s.Conns[0].Health = []PathHealth{report(0, c.t, 0.5, 0.1)}
	if d := backups(t, r.Decide(s)); d["10.1.0.1"] {
		t.Fatal("the only subflow was made backup")
	}
}

// No reports: no opinion (the kernel's default). Reports that stop: the
// policy lets go (every path usable), then has no opinion again.
func TestRAMPTCPWithoutReports(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	if acts := r.Decide(rampSnap(c)); len(acts) != 0 {
		t.Fatalf("no reports: %v, want no decision", acts)
	}
	r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.2, -1)))
	last := c.t
	c.add(500 * ms)
	if d := backups(t, r.Decide(rampSnap(c, report(0, last, 0, -1), report(1, last, 0.2, -1)))); !d["10.2.0.1"] {
		t.Fatal("inactive path released before the reports went stale")
	}
	c.add(600 * ms) // reports 1.1s old: stale
	acts := r.Decide(rampSnap(c, report(0, last, 0, -1), report(1, last, 0.2, -1)))
	if d := backups(t, acts); len(d) != 2 || d["10.1.0.1"] || d["10.2.0.1"] {
		t.Fatalf("stale reports: %v, want every path usable", d)
	}
	if acts := r.Decide(rampSnap(c, report(0, last, 0, -1), report(1, last, 0.2, -1))); len(acts) != 0 {
		t.Fatalf("after letting go: %v, want no decision", acts)
	}
}

// A radio that still says bad spares the probe.
func TestRAMPTCPNoProbeWhileTheLastHopIsBad(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	for i := 0; i < 100; i++ { // 5 s
		d := backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, 1), report(1, c.t, -1, 0.7))))
		if !d["10.2.0.1"] {
			t.Fatalf("probed at %v while the last hop reported 70%%", time.Duration(i)*50*ms)
		}
		c.add(50 * ms)
	}
	if st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]; st.Probes != 0 {
		t.Fatalf("%d probes", st.Probes)
	}
	// The radio recovers: the next probe brings the path back.
	back := false
	for i := 0; i < 40 && !back; i++ {
		c.add(50 * ms)
		back = !backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, 1), report(1, c.t, 0, 1))))["10.2.0.1"]
	}
	if !back {
		t.Fatal("not back after the last hop recovered")
	}
}

// The sender signal: retransmissions per segment sent.
func TestRAMPTCPSenderSignal(t *testing.T) {
	r := testRAMPTCP()
	r.Signal = "sender"
	c := &clock{t: time.Unix(100, 0)}
	sfs := rampSubflows()
	var d map[string]bool
	for i := 0; i < 10; i++ {
		c.add(20 * ms)
		sfs[0].BytesSent += 40 * 1448
		sfs[1].BytesSent += 40 * 1448
		sfs[1].TotalRetrans += 6 // 15%
		s := c.snap(sfs...)
		d = backups(t, r.Decide(s))
	}
	if d["10.1.0.1"] || !d["10.2.0.1"] {
		t.Fatalf("15%% retransmitted on path 2: %v", d)
	}
}

func TestRAMPTCPConfig(t *testing.T) {
	for _, c := range []struct{ src, err string }{
		{"{name: ramptcp}", ""},
		{"{name: ramptcp, loss_high: 10%, loss_low: 2%, health_low: 80%, health_high: 95%, hold: 500ms, max_hold: 4s, probe_window: 200ms, stale: 2s, warmup: 0s}", ""},
		{"{name: ramptcp, loss_low: 10%, loss_high: 5%}", "loss_low"},
		{"{name: ramptcp, hold: 2s, max_hold: 1s}", "max_hold"},
		{"{name: ramptcp, hold: 1}", "hold"},
		{"{name: ramptcp, signal: radio}", "signal"},
	} {
		m, err := yamlcfg.Parse("p.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		p := Build(m, Env{})
		err = m.Err()
		if c.err == "" && (err != nil || p == nil) {
			t.Fatalf("%s: %v", c.src, err)
		}
		if c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)) {
			t.Fatalf("%s: %v, want an error about %s", c.src, err, c.err)
		}
	}
}

// Transport loss alone cannot tell congestion from a failing last hop: it
// does not count while the last hop is known healthy, nor in a path's
// warm-up (slow start overshooting the bottleneck's queue).
func TestRAMPTCPTransportLossAndCongestion(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	if d := backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, 1), report(1, c.t, 0.15, 0.99)))); d["10.2.0.1"] {
		t.Fatal("15% transport loss with a healthy last hop set the path aside")
	}
	r = NewRAMPTCP() // warm-up 1s
	for i := 0; i < 19; i++ {
		if d := backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.15, -1)))); d["10.2.0.1"] {
			t.Fatalf("set aside %v into the warm-up", time.Duration(i)*50*ms)
		}
		c.add(50 * ms)
	}
	c.add(100 * ms)
	if d := backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.15, -1)))); !d["10.2.0.1"] {
		t.Fatal("not set aside after the warm-up")
	}
}

// A stalled connection (no ACK at all) sends no reports either: that says
// nothing, and the paths keep their state.
func TestRAMPTCPStalledKeepsState(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, 0.2, -1)))
	last := c.t
	c.add(1500 * ms)
	s := rampSnap(c, report(0, last, 0, -1), report(1, last, 0.2, -1))
	for i := range s.Conns[0].Subflows {
		s.Conns[0].Subflows[i].LastAckRecv = 1500 * ms
	}
	if d := backups(t, r.Decide(s)); !d["10.2.0.1"] || d["10.1.0.1"] {
		t.Fatalf("stalled: %v, want path 2 still inactive", d)
	}
}
