package policy

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// reopenWorld is a client connection under the kernel path manager with
// the defaults: it started on cell; the preferred wifi joined.
type reopenWorld struct {
	clock
	ifaces map[string][]netip.Addr
	p      *Prefer
	conn   *Conn
}

func newReopenWorld(t *testing.T, env Env) *reopenWorld {
	w := &reopenWorld{clock: clock{t: time.Unix(0, 0)}, ifaces: map[string][]netip.Addr{"wifi": {wifiAddr}, "cell": {cellAddr}}}
	env.PathManager = KernelPM
	env.Addrs = func(n string) ([]netip.Addr, bool) { a, ok := w.ifaces[n]; return a, ok }
	env.Interfaces = func() map[string][]netip.Addr { return w.ifaces }
	w.p = NewPrefer(env)
	if err := w.p.SetTargets([]string{"wifi"}); err != nil {
		t.Fatal(err)
	}
	w.conn = &Conn{Token: 1, Established: true, Local: netip.AddrPortFrom(cellAddr, 1), Remote: remote,
		Subflows: []observe.Subflow{sf("10.2.0.1", 1, 20*ms, 10), sf("10.1.0.1", 2, 20*ms, 10)}}
	w.conn.Subflows[1].LocalID = 1
	return w
}

func (w *reopenWorld) decide() []Action {
	return w.p.Decide(&Snapshot{Now: w.t, Conns: []*Conn{w.conn}})
}

func (w *reopenWorld) status() PreferConnStatus {
	return w.p.Status().(PreferStatus).Conns[0]
}

// The defaults under the kernel path manager: the fast return is on, its
// SYN timeout 40 ms; unsent data is bounded on every subflow.
func TestPreferKernelPMDefaults(t *testing.T) {
	p := NewPrefer(Env{PathManager: KernelPM})
	if p.ProbeInterval != 40*ms || p.NotSentLowat != 16<<10 || p.RTOMax != time.Second || p.mesh != nil {
		t.Fatalf("defaults: probe_interval %v, notsent_lowat %v, rto_max %v, opens subflows %v", p.ProbeInterval, p.NotSentLowat, p.RTOMax, p.mesh != nil)
	}
	// As built from a config that names only the paths.
	m, err := yamlcfg.Parse("c.yaml", []byte("name: prefer\npaths: [wifi]"))
	if err != nil {
		t.Fatal(err)
	}
	b := Build(m, Env{PathManager: KernelPM}).(*Prefer)
	if err := m.Err(); err != nil || b.ProbeInterval != 40*ms {
		t.Fatalf("built: %v, probe_interval %v", err, b.ProbeInterval)
	}
}

func TestPreferReopensAStalledPreferredPathUnderTheKernelPM(t *testing.T) {
	w := newReopenWorld(t, Env{})
	if acts := w.decide(); len(kinds(acts, Reopen)) != 0 {
		t.Fatalf("healthy: %v", kinds(acts, Reopen))
	}
	// The wifi goes silent: one retransmission timeout is a tail loss on
	// a working path, not yet a reason to close the subflow.
	wifi := &w.conn.Subflows[1]
	wifi.Unacked, wifi.LastAckRecv, wifi.Backoff = 30, 400*ms, 1
	w.add(100 * ms)
	acts := w.decide()
	if r := kinds(acts, Reopen); len(r) != 0 {
		t.Fatalf("after one RTO: %v", r)
	}
	if d := backups(t, kinds(acts, Backup)); !d["10.1.0.1"] || d["10.2.0.1"] {
		t.Fatalf("stalled: backup %v, want the stalled wifi backup and cell carrying", d)
	}
	if st := w.status(); len(st.Probing) != 1 || !strings.Contains(st.Probing[0], "retransmission timeouts in a row") {
		t.Fatalf("status %+v", st.Probing)
	}
	// A second timeout in a row: its endpoint is to be re-added, the
	// probes' SYN every 40 ms, re-added every 6 of them (4 linear
	// retransmissions, then the timeout would double).
	wifi.Backoff, wifi.LastAckRecv, wifi.MinRTT = 2, 1200*ms, 20*ms
	w.add(100 * ms)
	r := kinds(w.decide(), Reopen)
	if len(r) != 1 || r[0].Subflow.Local.AddrPort() != netip.AddrPortFrom(wifiAddr, 0) || r[0].Subflow.Remote.AddrPort() != remote || r[0].Interval != 288*ms || r[0].Token != 1 {
		t.Fatalf("reopen %+v, want wifi's endpoint re-added every 288ms", r)
	}
	if req := w.p.Requirements(); req.SynRTO[wifiAddr] != 40*ms || req.RTOMax[wifiAddr] != time.Second || req.NotSentLowat != 16<<10 {
		t.Fatalf("requirements %+v, want a 40ms SYN timeout on wifi", req)
	}
	// The re-add closed the stalled subflow; a probe is joining. Wanted
	// again every round until one answers, the other paths carrying.
	probe := sf("10.1.0.1", 3, 0, 10)
	probe.State = observe.TCPSynSent
	w.conn.Subflows, w.conn.Pending = w.conn.Subflows[:1], []observe.Subflow{probe}
	for i := 0; i < 5; i++ {
		w.add(100 * ms)
		acts := w.decide()
		if r := kinds(acts, Reopen); len(r) != 1 || !strings.Contains(r[0].Reason, "closed by the last re-add") {
			t.Fatalf("round %d: %v", i, r)
		}
		if d := backups(t, kinds(acts, Backup)); len(d) != 1 || !d["10.2.0.1"] {
			t.Fatalf("round %d: backup %v: cell is all there is, backup until a preferred subflow joins (the kernel sends on it)", i, d)
		}
	}
	// The path answers: the probe is established and carries the data.
	probe.State, probe.SRTT = observe.TCPEstablished, 20*ms
	w.conn.Pending, w.conn.Subflows = nil, append(w.conn.Subflows, probe)
	w.add(100 * ms)
	acts = w.decide()
	if r := kinds(acts, Reopen); len(r) != 0 {
		t.Fatalf("answered, still reopening: %v", r)
	}
	if d := backups(t, kinds(acts, Backup)); d["10.1.0.1"] || !d["10.2.0.1"] {
		t.Fatalf("answered: backup %v, want wifi carrying", d)
	}
	if len(w.p.Requirements().SynRTO) != 0 {
		t.Fatal("the SYN timeout stays set after the return")
	}
}

// A preferred address whose interface lost it: its subflows cannot send
// again, and what they hold stays theirs until MPTCP's own retransmission
// timer, so they are closed at once (a Gone reopen, repeated while they
// remain); nothing is re-added while it is gone (a subflow from it would
// fail at once). The address event brings the re-add. A preference by
// interface name has no address while it is gone: the subflows say the
// address was a preferred one.
func TestPreferClosesTheSubflowsOfAGoneAddressAndReopensOnItsReturn(t *testing.T) {
	for _, target := range []string{wifiAddr.String(), "wifi"} {
		t.Run(target, func(t *testing.T) {
			w := newReopenWorld(t, Env{})
			if err := w.p.SetTargets([]string{target}); err != nil {
				t.Fatal(err)
			}
			w.decide()
			wifi := &w.conn.Subflows[1]
			// Gone before its subflow even stalled: closed at once.
			w.ifaces["wifi"] = nil
			w.add(100 * ms)
			r := kinds(w.decide(), Reopen)
			if len(r) != 1 || !r[0].Gone || r[0].Subflow.Local.Addr() != wifiAddr || r[0].Interval != closeGonePace {
				t.Fatalf("address gone: %+v, want one Gone reopen of wifi", r)
			}
			if st := w.status(); len(st.Probing) == 0 || !strings.Contains(st.Probing[0], "address gone: its 1 subflow(s) closed") {
				t.Fatalf("status %v", st.Probing)
			}
			// Still there a round later (not closed yet): asked again.
			wifi.Unacked, wifi.LastAckRecv, wifi.Backoff = 30, 2*time.Second, 3
			w.add(100 * ms)
			if r := kinds(w.decide(), Reopen); len(r) != 1 || !r[0].Gone {
				t.Fatalf("still there: %+v", r)
			}
			// Closed: nothing while the address is gone.
			w.conn.Subflows = w.conn.Subflows[:1]
			for i := 0; i < 3; i++ {
				w.add(100 * ms)
				if r := kinds(w.decide(), Reopen); len(r) != 0 {
					t.Fatalf("closed, address gone: %+v", r)
				}
			}
			// Back: re-added at once, not a Gone one.
			w.ifaces["wifi"] = []netip.Addr{wifiAddr}
			w.add(20 * ms)
			if r := kinds(w.decide(), Reopen); len(r) != 1 || r[0].Gone || r[0].Subflow.Local.Addr() != wifiAddr {
				t.Fatalf("address back: %+v", r)
			}
		})
	}
}

// Only preferred addresses are closed when gone: the other paths' subflows
// are left to the kernel (closed, the kernel path manager would not open
// them again).
func TestPreferLeavesAGoneAddressThatIsNotPreferred(t *testing.T) {
	w := newReopenWorld(t, Env{})
	w.decide()
	w.ifaces["cell"] = nil
	w.add(100 * ms)
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("cell gone: %+v", r)
	}
}

// A connection that never had a subflow from the preferred address (its
// join met a silent path, or the kernel reset it: the kernel path manager
// does not join again) has the address probed once the join had time.
func TestPreferReopensAPreferredPathThatNeverJoined(t *testing.T) {
	w := newReopenWorld(t, Env{})
	cell := w.conn.Subflows[0]
	cell.MinRTT = 80 * ms
	w.conn.Subflows = []observe.Subflow{cell}
	// The kernel's join from wifi, its SYN unanswered.
	join := sf("10.1.0.1", 2, 0, 10)
	join.State = observe.TCPSynSent
	w.conn.Pending = []observe.Subflow{join}
	// The grace: a second and two of the connection's round trips.
	for _, at := range []time.Duration{0, 500 * ms, 1150 * ms} {
		w.t = time.Unix(0, 0).Add(at)
		if r := kinds(w.decide(), Reopen); len(r) != 0 {
			t.Fatalf("at %v, within the grace: %v", at, r)
		}
	}
	w.t = time.Unix(0, 0).Add(1170 * ms)
	r := kinds(w.decide(), Reopen)
	// The cell's 80 ms round trip stands for wifi's: the re-add waits for
	// the answer to the SYN after the linear ones (as on a stalled path).
	if len(r) != 1 || r[0].Subflow.Local.Addr() != wifiAddr || r[0].Interval != 428*ms || !strings.Contains(r[0].Reason, "no subflow from it was established since the connection was") {
		t.Fatalf("after the grace: %+v", r)
	}
	if st := w.status(); len(st.Probing) != 1 || !strings.Contains(st.Probing[0], "reopening") {
		t.Fatalf("status %v", st.Probing)
	}
	// Joined: healthy, nothing more.
	join.State, join.SRTT, join.MinRTT = observe.TCPEstablished, 80*ms, 80*ms
	w.conn.Pending, w.conn.Subflows = nil, append(w.conn.Subflows, join)
	w.add(100 * ms)
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("joined, still reopening: %v", r)
	}
	// A daemon that first sees a connection long established gives the
	// join the same grace from then.
	w = newReopenWorld(t, Env{})
	w.t = time.Unix(1000, 0)
	w.conn.Subflows = w.conn.Subflows[:1]
	w.decide()
	w.add(999 * ms)
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("first seen 999 ms ago: %v", r)
	}
	w.add(2 * ms)
	if r := kinds(w.decide(), Reopen); len(r) != 1 {
		t.Fatalf("first seen 1001 ms ago: %v", r)
	}
}

// With two preferred paths, one that never joined is probed only while
// the connection is not on a path ranked as high: from a lower one it
// would get nothing, and every re-add costs the connection a window.
func TestPreferProbesANeverJoinedPathOnlyWhenItRanksHigher(t *testing.T) {
	eth := netip.MustParseAddr("10.3.0.1")
	for _, c := range []struct {
		targets []string
		want    int
	}{
		{[]string{"wifi", "eth"}, 0}, // on wifi, the first: eth is not probed
		{[]string{"eth", "wifi"}, 1}, // on wifi, the second: eth, the first, is
	} {
		w := newReopenWorld(t, Env{})
		w.ifaces["eth"] = []netip.Addr{eth}
		if err := w.p.SetTargets(c.targets); err != nil {
			t.Fatal(err)
		}
		w.decide()
		w.add(1100 * ms)
		r := kinds(w.decide(), Reopen)
		if len(r) != c.want || c.want == 1 && r[0].Subflow.Local.Addr() != eth {
			t.Fatalf("preferred %v, on wifi: reopen %+v, want %d for eth", c.targets, r, c.want)
		}
	}
}

// Server-side connections, ones whose join from the preferred address is
// still due, and probe_interval: 0s are left alone.
func TestPreferReopensOnlyWhatItShould(t *testing.T) {
	stall := func(w *reopenWorld) {
		w.conn.Subflows[1].Unacked, w.conn.Subflows[1].LastAckRecv, w.conn.Subflows[1].Backoff = 30, 2*time.Second, 3
	}
	w := newReopenWorld(t, Env{})
	w.conn.ServerSide = true
	stall(w)
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("server side: %v", r)
	}
	w = newReopenWorld(t, Env{})
	w.conn.Subflows = w.conn.Subflows[:1] // wifi has not joined yet
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("not on wifi yet: %v", r)
	}
	w = newReopenWorld(t, Env{})
	w.p.ProbeInterval = 0
	stall(w)
	if r := kinds(w.decide(), Reopen); len(r) != 0 {
		t.Fatalf("probe_interval 0s: %v", r)
	}
}

// The pace: a re-add once the probe's linear SYN retransmissions are
// spent, so that the path hears a SYN every probe_interval; after 10 s of
// silence it halves at every re-add, down to one every 4 s. The SYNs'
// times are the kernel's: the timeout in whole ticks, each retransmission
// a tick late or two (at HZ 250, 40 ms: 44 or 48 ms apart).
func TestPreferReopenPeriod(t *testing.T) {
	for _, c := range []struct {
		env          Env
		interval     time.Duration // probe_interval (0: the default, 40 ms)
		probing, rtt time.Duration
		want         time.Duration
	}{
		// The fifth retransmission at the linear pace leaves by 5 × 48 ms;
		// the re-add comes a slot of 48 ms after (the answer to that SYN,
		// 20 ms and the margin, is back by 280 ms).
		{Env{}, 0, 0, 20 * ms, 288 * ms},
		{Env{SynLinearKnown: true, SynLinearTimeouts: 4}, 0, 5 * time.Second, 0, 288 * ms},
		{Env{SynLinearKnown: true, SynLinearTimeouts: 0}, 0, 0, 0, 96 * ms}, // before 6.5: every SYN timeout doubles
		{Env{SynLinearKnown: true, SynLinearTimeouts: 8}, 0, 0, 0, 480 * ms},
		// HZ 1000 (a tick of 1 ms): 5 × 42 ms and one more.
		{Env{Tick: ms}, 0, 0, 20 * ms, 252 * ms},
		// HZ 100: 40 ms is 4 ticks, each retransmission 50 to 60 ms after
		// the one before.
		{Env{Tick: 10 * ms}, 0, 0, 20 * ms, 360 * ms},
		// 25 ms is 7 ticks at HZ 250 (28 ms): 5 × 36 ms and one more.
		{Env{}, 25 * ms, 0, 0, 216 * ms},
		// A path of 40 ms round trip: the answer to the last SYN at the
		// linear pace is awaited (240 + 40 + 20 ms), before the next SYN
		// (not before 5 × 44 + 80 + 4 = 304 ms).
		{Env{}, 0, 0, 40 * ms, 300 * ms},
		// The paper's 80 ms round trip: the answer to that SYN could come
		// after the next leaves (304 ms), so the re-add waits for the
		// answer to that one (it leaves by 240 + 88 ms; + 80 + 20 ms).
		{Env{}, 0, 0, 80 * ms, 428 * ms},
		{Env{}, 0, 0, 44 * ms, 304 * ms},
		{Env{}, 0, 0, 45 * ms, 393 * ms},
		{Env{}, 0, 0, 400 * ms, 240*ms + 88*ms + 168*ms + 328*ms + 400*ms + 20*ms},
		{Env{}, 0, 10*time.Second + ms, 0, 576 * ms},
		{Env{}, 0, 10*time.Second + 576*ms + ms, 0, 1152 * ms},
		{Env{}, 0, time.Hour, 0, 4 * time.Second},
	} {
		p := NewPrefer(Env{PathManager: KernelPM, SynLinearTimeouts: c.env.SynLinearTimeouts, SynLinearKnown: c.env.SynLinearKnown, Tick: c.env.Tick})
		if c.interval > 0 {
			p.ProbeInterval = c.interval
		}
		if got := p.reopenPeriod(c.probing, c.rtt); got != c.want {
			t.Errorf("linear %d (known %v), tick %v, probe_interval %v, probing %v, rtt %v: period %v, want %v", c.env.SynLinearTimeouts, c.env.SynLinearKnown, c.env.Tick, p.ProbeInterval, c.probing, c.rtt, got, c.want)
		}
	}
	// probe_interval 0s (probing off: nothing asks for a period) still
	// gives one, and at once.
	p := NewPrefer(Env{PathManager: KernelPM})
	p.ProbeInterval = 0
	if got := p.reopenPeriod(0, 80*ms); got != 100*ms {
		t.Errorf("probe_interval 0s: period %v, want 100ms", got)
	}
}

// A wish for the connection's own address says so (the kernel numbers its
// subflows 0 on the wire, and it may have no endpoint); one for a join's
// address does not.
func TestPreferMarksTheConnectionsOwnAddress(t *testing.T) {
	for _, initial := range []netip.Addr{wifiAddr, cellAddr} {
		w := newReopenWorld(t, Env{})
		w.conn.Local = netip.AddrPortFrom(initial, 1)
		w.decide()
		w.ifaces["wifi"] = nil
		w.add(100 * ms)
		if r := kinds(w.decide(), Reopen); len(r) != 1 || r[0].Own != (initial == wifiAddr) {
			t.Fatalf("started on %s, wifi gone: %+v", initial, r)
		}
		w.conn.Subflows = w.conn.Subflows[:1]
		w.ifaces["wifi"] = []netip.Addr{wifiAddr}
		w.add(100 * ms)
		if r := kinds(w.decide(), Reopen); len(r) != 1 || r[0].Own != (initial == wifiAddr) {
			t.Fatalf("started on %s, wifi back: %+v", initial, r)
		}
	}
}
