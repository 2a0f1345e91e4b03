package policy

import (
	"slices"
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

// A probe whose reports are neither bad nor good (loss between the two
// limits) ends with the path inactive again, its hold doubled, and counts
// as an inactivation like a probe that brought a bad report.
func TestRAMPTCPProbeWithoutAVerdict(t *testing.T) {
	r := testRAMPTCP()
	c := &clock{t: time.Unix(100, 0)}
	step := func(loss float64) bool {
		c.add(50 * ms)
		return backups(t, r.Decide(rampSnap(c, report(0, c.t, 0, -1), report(1, c.t, loss, -1))))["10.2.0.1"]
	}
	if !step(0.2) {
		t.Fatal("not inactive on a bad report")
	}
	probed := false
	for i := 0; i < 40; i++ { // the hold (1 s), the probe (300 ms), and more
		if !step(0.05) {
			probed = true
		}
	}
	st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]
	if !probed || st.State != "inactive" || st.Probes != 1 || st.HoldMs != 2000 || st.Inactivations != 2 ||
		!strings.Contains(st.Reason, "no good report") {
		t.Fatalf("after a probe at 5%% loss: probed %v, %+v; want inactive again after one probe, hold 2s, 2 inactivations", probed, st)
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
		{"{name: ramptcp, worth_trial: 0s, worth_gain: 20%, worth_cc: [bbr, bbr3]}", ""},
		{"{name: ramptcp, worth_gain: 2}", "worth_gain"},
		{"{name: ramptcp, worth_trials: 1}", ""},
		{"{name: ramptcp, worth_trials: 0}", "worth_trials"},
		{"{name: ramptcp, notsent_lowat_except: []}", ""},
		{"{name: ramptcp, notsent_lowat_except: [bbr, bbr2, bbr3, tcp-x_1]}", ""},
		{"{name: ramptcp, notsent_lowat_except: [a, b, c, d, e]}", "notsent_lowat_except: 5 congestion controls; at most 4"},
		{"{name: ramptcp, notsent_lowat_except: [bbr, 'bad name']}", `"bad name" is not a congestion control's name`},
		{"{name: ramptcp, notsent_lowat_except: [averyverylongccname]}", "is not a congestion control's name"},
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

// rampDelivery drives a connection whose in-order delivery depends on
// whether path 2 is in use: rates gives, round by round, what the
// connection delivers in order and what path 1 delivers on its own
// (bytes/s), with bad reports on path 2 throughout and 1 MiB in flight.
// It returns path 2's backup flag after every 50 ms round.
func rampDelivery(t *testing.T, r *RAMPTCP, rounds int, rates func(round int, inUse bool) (conn, p1 float64)) []bool {
	t.Helper()
	return rampDeliveryReports(t, r, rounds, 1<<20, "bbr", rates, func(int) (float64, float64) { return 0.2, 0.8 })
}

// rampDeliveryReports is rampDelivery with what is in flight, the
// subflows' congestion control and path 2's reports (loss, last hop)
// round by round.
func rampDeliveryReports(t *testing.T, r *RAMPTCP, rounds int, inFlight uint64, cc string, rates func(round int, inUse bool) (conn, p1 float64),
	p2 func(round int) (loss, lastHop float64)) []bool {
	t.Helper()
	c := &clock{t: time.Unix(100, 0)}
	var acked, p1, p2acked uint64 = 1, 1, 1
	inUse := true
	var out []bool
	for i := 0; i < rounds; i++ {
		c.add(50 * ms)
		conn, one := rates(i, inUse)
		acked += uint64(conn * 0.05)
		p1 += uint64(one * 0.05)
		if inUse {
			p2acked += uint64(max(conn-one, 0) * 0.05)
		}
		loss, lastHop := p2(i)
		s := rampSnap(c, report(0, c.t, 0, 1), report(1, c.t, loss, lastHop))
		s.Conns[0].BytesAcked, s.Conns[0].BytesSent = acked, acked+inFlight
		s.Conns[0].Subflows[0].BytesAcked, s.Conns[0].Subflows[1].BytesAcked = p1, p2acked
		s.Conns[0].Subflows[0].CC, s.Conns[0].Subflows[1].CC = cc, cc
		d := backups(t, r.Decide(s))
		if d["10.1.0.1"] {
			t.Fatalf("round %d: the good path set aside", i)
		}
		inUse = !d["10.2.0.1"]
		out = append(out, d["10.2.0.1"])
	}
	return out
}

// A lossy path that still delivers (a rate-based congestion control keeps
// it going) is judged in use when its report turns bad, and kept when the
// connection delivers more with it than its other path alone; once it
// delivers less, it goes aside.
func TestRAMPTCPKeepsALossyPathThatPays(t *testing.T) {
	r := testRAMPTCP()
	worse := 120 // from this round on, the path drags the connection down
	backup := rampDelivery(t, r, 200, func(i int, inUse bool) (float64, float64) {
		switch {
		case !inUse:
			return mbitps(18), mbitps(18)
		case i >= worse:
			return mbitps(12), mbitps(18)
		}
		return mbitps(30), mbitps(18)
	})
	for i := 0; i < worse; i++ {
		if backup[i] {
			t.Fatalf("set aside %v in, though the connection delivers 30 Mbit/s with it and path 1 18 alone", time.Duration(i)*50*ms)
		}
	}
	st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]
	if st.State != "inactive" || st.OthersMbit == nil || *st.OthersMbit < 17 || *st.OthersMbit > 19 || *st.WithMbit >= *st.OthersMbit {
		t.Fatalf("after delivery fell to 12 Mbit/s with it: %+v, want inactive, its last 3 s measured", st)
	}
	off := -1
	for i := worse; i < len(backup); i++ {
		if backup[i] {
			off = i
			break
		}
	}
	if off < 0 || off > worse+70 {
		t.Fatalf("set aside at round %d, want within about 3 s of round %d", off, worse)
	}
	for i := off; i < len(backup); i++ {
		if !backup[i] {
			t.Fatalf("in use again at round %d: the last hop still says bad and it did not pay", i)
		}
	}
}

// A lossy path that does not pay (its holes hold the connection up) fails
// its trials and stays aside; its three trials (300 ms, then 600 ms and
// 1.2 s, each after its hold) are the only time it carries once its
// report turned bad. With the check off, a loss-based congestion
// control, or a connection with little in flight (idle), it goes aside at
// once.
func TestRAMPTCPSetsAsideALossyPathThatDoesNotPay(t *testing.T) {
	r := testRAMPTCP()
	backup := rampDelivery(t, r, 300, func(i int, inUse bool) (float64, float64) {
		if inUse {
			return mbitps(17), mbitps(18)
		}
		return mbitps(18), mbitps(18)
	})
	inUse, last := 0, 0
	for i, b := range backup {
		if !b {
			inUse, last = inUse+1, i
		}
	}
	// 2.1 s of trials are 42 rounds of 50 ms (each trial's end is judged
	// in the round after it).
	if inUse < 42 || inUse > 46 || last > 120 {
		t.Fatalf("in use %d of %d rounds, the last at round %d; want only its three trials (2.1 s), over within 6 s", inUse, len(backup), last)
	}
	if st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]; st.State != "inactive" || st.Inactivations != 3 || st.OthersMbit == nil {
		t.Fatalf("after its trials: %+v, want inactive three times, with the last trial's rates", st)
	}
	// Off, idle, or a loss-based congestion control: no trial at all,
	// though the path would pay.
	pays := func(_ int, inUse bool) (float64, float64) {
		if inUse {
			return mbitps(30), mbitps(18)
		}
		return mbitps(18), mbitps(18)
	}
	idle := func(int, bool) (float64, float64) { return mbitps(0.1), mbitps(0.1) }
	bad := func(int) (float64, float64) { return 0.2, 0.8 }
	for _, tc := range []struct {
		name     string
		trial    time.Duration
		inFlight uint64
		cc       string
		rates    func(int, bool) (float64, float64)
	}{
		{"worth_trial 0", 0, 1 << 20, "bbr", pays},
		{"idle", 300 * ms, 1000, "bbr", idle},
		{"cubic", 300 * ms, 1 << 20, "cubic", pays},
	} {
		r = testRAMPTCP()
		r.WorthTrial = tc.trial
		for i, b := range rampDeliveryReports(t, r, 120, tc.inFlight, tc.cc, tc.rates, bad) {
			if !b {
				t.Fatalf("%s: in use at round %d while the last hop says bad", tc.name, i)
			}
		}
	}
}

// One trial right after a path turns lossy is noisy: a path that shows no
// gain in its first trial (300 ms) and pays in its second (600 ms, after
// its hold of 1 s) is kept in use from then on.
func TestRAMPTCPRetriesAFailedTrial(t *testing.T) {
	r := testRAMPTCP()
	uses := 0 // rounds in use so far
	backup := rampDelivery(t, r, 120, func(i int, inUse bool) (float64, float64) {
		if !inUse {
			return mbitps(18), mbitps(18)
		}
		uses++
		if uses <= 7 { // the first trial and the round that judges it
			return mbitps(19), mbitps(18)
		}
		return mbitps(30), mbitps(18)
	})
	first := slices.Index(backup, true)
	if first < 0 || first > 8 {
		t.Fatalf("first trial: set aside at round %d, want after its 300 ms", first)
	}
	back := first + slices.Index(backup[first:], false)
	if back < first+19 || back > first+22 {
		t.Fatalf("second trial at round %d, want at the end of the 1 s hold (round %d)", back, first+20)
	}
	for i := back; i < len(backup); i++ {
		if backup[i] {
			t.Fatalf("set aside at round %d after a second trial in which it paid", i)
		}
	}
	if st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1]; st.State != "tolerated" || st.Inactivations != 1 {
		t.Fatalf("after its second trial: %+v, want tolerated, inactive once", st)
	}
}

// A tolerated path's reports are good now and then (a lossy link's window
// sometimes loses nothing): it stays tolerated through them, and becomes
// simply active once they have been good for a hold.
func TestRAMPTCPToleratedThroughIntermittentGoodReports(t *testing.T) {
	r := testRAMPTCP()
	var states []string
	healed := 100
	rates := func(i int, inUse bool) (float64, float64) {
		if i > 0 {
			states = append(states, r.Status().([]RAMPTCPConnStatus)[0].Paths[1].State)
		}
		if inUse {
			return mbitps(30), mbitps(18)
		}
		return mbitps(18), mbitps(18)
	}
	backup := rampDeliveryReports(t, r, 140, 1<<20, "bbr", rates, func(i int) (float64, float64) {
		if i >= healed || (i > 20 && i%2 == 0) {
			return 0, 1
		}
		return 0.2, 0.8
	})
	for i := 8; i < len(backup); i++ {
		if backup[i] {
			t.Fatalf("set aside at round %d (state %s): good reports now and then must not end its toleration", i, states[i-1])
		}
	}
	for i := 20; i < healed+19 && i < len(states); i++ {
		if states[i] != "tolerated" {
			t.Fatalf("round %d: %s, want tolerated until its reports have been good for a hold", i+1, states[i])
		}
	}
	if st := r.Status().([]RAMPTCPConnStatus)[0].Paths[1].State; st != "active" {
		t.Fatalf("good reports for 2 s: %s, want active", st)
	}
}

// ramptcp's notsent_lowat comes with its exceptions (BBR by default, or
// what the entry gives) in the requirements the daemon carries out.
func TestRAMPTCPLowatExceptions(t *testing.T) {
	for _, c := range []struct {
		src  string
		want []string
	}{
		{"{name: ramptcp}", []string{"bbr"}},
		{"{name: ramptcp, notsent_lowat_except: []}", []string{}},
		{"{name: ramptcp, notsent_lowat_except: [bbr, bbr3]}", []string{"bbr", "bbr3"}},
	} {
		m, err := yamlcfg.Parse("p.yaml", []byte(c.src))
		if err != nil {
			t.Fatal(err)
		}
		p := Build(m, Env{})
		if err := m.Err(); err != nil {
			t.Fatal(err)
		}
		req := p.(Requirer).Requirements()
		if req.NotSentLowat != 64<<10 || !slices.Equal(req.NotSentLowatExcept, c.want) {
			t.Fatalf("%s: notsent_lowat %d except %q, want 65536 except %q", c.src, req.NotSentLowat, req.NotSentLowatExcept, c.want)
		}
	}
}
