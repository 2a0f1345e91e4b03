package policy

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
)

// holdRound advances the world by a sample: the cell subflow carries,
// delivering rate bytes/s (its bytes acknowledged grow), its SRTT srtt
// over a 20 ms minimum.
func (w *reopenWorld) holdRound(rate uint64, srtt time.Duration) []Action {
	w.add(100 * ms)
	cell := &w.conn.Subflows[0]
	cell.MinRTT, cell.SRTT = 20*ms, srtt
	cell.DeliveryRate = rate
	cell.BytesAcked += rate / 10
	return w.decide()
}

// caps lists the Limit actions' rates (bytes/s) by local address.
func caps(acts []Action) map[string]uint64 {
	out := map[string]uint64{}
	for _, a := range kinds(acts, Limit) {
		out[a.Subflow.Local.Addr().String()] = uint64(a.Rate.BytesPerSecond())
	}
	return out
}

// bounds lists the Limit actions' TCP_NOTSENT_LOWAT (bytes) by local
// address.
func bounds(acts []Action) map[string]int64 {
	out := map[string]int64{}
	for _, a := range kinds(acts, Limit) {
		out[a.Subflow.Local.Addr().String()] = int64(a.NotSent)
	}
	return out
}

// stallWifi makes the preferred subflow silent (stalled).
func (w *reopenWorld) stallWifi() {
	wifi := &w.conn.Subflows[1]
	wifi.Unacked, wifi.LastAckRecv, wifi.Backoff = 30, 400*ms, 1
}

// While the preferred path is out, the other path is held to the upper
// quartile of what it delivered once it shows a queue, from a second into
// the outage;
// the cap goes as soon as the preferred path is viable again.
func TestPreferHoldsTheOtherPathWhileThePreferredIsOut(t *testing.T) {
	w := newReopenWorld(t, Env{})
	if c := caps(w.decide()); len(c) != 0 {
		t.Fatalf("preferred viable: caps %v", c)
	}
	w.stallWifi()
	// The outage's first round takes no sample (its figures are from
	// before it); the eleventh is a second after it, with ten samples.
	rates := []uint64{900e3, 500e3, 520e3, 480e3, 510e3, 490e3, 530e3, 470e3, 505e3, 495e3, 515e3}
	var got map[string]uint64
	var acts []Action
	for i, r := range rates {
		acts = w.holdRound(r, 40*ms)
		got = caps(acts)
		if i < len(rates)-1 && len(got) != 0 {
			t.Fatalf("round %d of the outage: capped %v before the warm-up is over", i+1, got)
		}
	}
	if got["10.2.0.1"] != 515e3 || len(got) != 1 {
		t.Fatalf("a second in: caps %v, want cell held to 515000 B/s (the upper quartile of the ten samples after the first round) and nothing else", got)
	}
	// Little queued unsent on it: what the cap sends in 2 ms.
	if b := bounds(acts); b["10.2.0.1"] != 1030 {
		t.Fatalf("a second in: TCP_NOTSENT_LOWAT %v, want cell's 1030 B", b)
	}
	// Held at that cap whatever it delivers now.
	if c := caps(w.holdRound(100e3, 40*ms)); c["10.2.0.1"] != 515e3 {
		t.Fatalf("held: %v", c)
	}
	// A fresh wifi subflow answers (its SYN/ACK): until its join
	// completes, cell is held to a tenth of its cap.
	w.conn.Subflows[1] = sf("10.1.0.1", 3, 20*ms, 10)
	wifi := &w.conn.Subflows[1]
	wifi.Cookie, wifi.MPFlags = 7, observe.FlagJoinLoc
	acts = w.holdRound(500e3, 40*ms)
	if c := caps(acts); c["10.2.0.1"] != 515e3/10 || len(c) != 1 {
		t.Fatalf("preferred join completing: caps %v, want cell at a tenth of 515000 B/s", c)
	}
	if b := bounds(acts); b["10.2.0.1"] != 1030 {
		t.Fatalf("preferred join completing: TCP_NOTSENT_LOWAT %v, want cell's 1030 B still", b)
	}
	// The join completed: no cap (the actuator lifts it).
	wifi.MPFlags |= observe.FlagFullyEst
	if c := caps(w.holdRound(500e3, 40*ms)); len(c) != 0 {
		t.Fatalf("preferred viable again: caps %v", c)
	}
	// The next outage measures again.
	w.stallWifi()
	for range 5 {
		if c := caps(w.holdRound(300e3, 40*ms)); len(c) != 0 {
			t.Fatalf("second outage, warm-up: %v", c)
		}
	}
	for range 6 {
		acts = w.holdRound(300e3, 40*ms)
		got = caps(acts)
	}
	// (5 + 6 rounds: a second after the outage's first.)
	if got["10.2.0.1"] != 300e3 {
		t.Fatalf("second outage: %v, want 300000 B/s", got)
	}
	if b := bounds(acts); b["10.2.0.1"] != 600 {
		t.Fatalf("second outage: TCP_NOTSENT_LOWAT %v, want cell's 600 B", b)
	}
}

// The other path's congestion control ramps up in the outage's first
// rounds, before its path shows a queue: what it delivers then is not its
// path's rate, and the cap is the upper quartile of the samples taken with the
// queue only, however many came before it.
func TestPreferHoldsTheOtherPathAtWhatItDeliversWithAQueue(t *testing.T) {
	w := newReopenWorld(t, Env{})
	w.decide()
	w.stallWifi()
	// Eight rounds of ramp-up (seven samples: the first round takes
	// none), no queue yet.
	for i := range 8 {
		if c := caps(w.holdRound(200e3, 22*ms)); len(c) != 0 {
			t.Fatalf("ramp-up round %d: capped %v", i+1, c)
		}
	}
	// The queue shows: four samples are too few for a cap, a second
	// into the outage or not.
	for i := range 4 {
		if c := caps(w.holdRound(500e3, 40*ms)); len(c) != 0 {
			t.Fatalf("queued round %d: capped %v from fewer than %d samples with a queue (the ramp-up's would make it 200000 B/s)", i+1, c, holdMinSamples)
		}
	}
	if c := caps(w.holdRound(500e3, 40*ms)); c["10.2.0.1"] != 500e3 || len(c) != 1 {
		t.Fatalf("five samples with a queue: caps %v, want cell held to 500000 B/s (their upper quartile, the ramp-up's left out)", c)
	}
}

// The other path's BBR goes into ProbeRTT as it takes over (four segments
// in flight for 200 ms, its queue still showing): three of its first five
// samples with a queue are what ProbeRTT lets through, not its path's
// rate. The cap is its path's rate all the same (the median would be the
// ProbeRTT's).
func TestPreferHoldsTheOtherPathAtItsRateThroughProbeRTT(t *testing.T) {
	w := newReopenWorld(t, Env{})
	w.decide()
	w.stallWifi()
	for range 6 { // the outage's first round (no sample), then five without a queue
		w.holdRound(100e3, 22*ms)
	}
	var got map[string]uint64
	for _, r := range []uint64{230e3, 230e3, 230e3, 500e3, 500e3} {
		got = caps(w.holdRound(r, 40*ms))
	}
	if got["10.2.0.1"] != 500e3 || len(got) != 1 {
		t.Fatalf("a second in: caps %v, want cell held to 500000 B/s (the median of the samples would be ProbeRTT's 230000)", got)
	}
}

// The preferred interface goes down (its address with it): an outage all
// the same, and the other path is held from a second into it; the fresh
// preferred subflow takes over once the address is back.
func TestPreferHoldsTheOtherPathWhileThePreferredInterfaceIsDown(t *testing.T) {
	w := newReopenWorld(t, Env{})
	w.decide()
	delete(w.ifaces, "wifi")
	w.conn.Subflows = w.conn.Subflows[:1] // closed as the address went
	var acts []Action
	for range 11 {
		acts = w.holdRound(500e3, 40*ms)
	}
	if c := caps(acts); c["10.2.0.1"] != 500e3 || len(c) != 1 {
		t.Fatalf("a second into the interface's outage: caps %v, want cell held to 500000 B/s", c)
	}
	if st := w.status(); st.State != "preferred-address-gone" {
		t.Fatalf("state %q", st.State)
	}
	w.ifaces["wifi"] = []netip.Addr{wifiAddr}
	fresh := sf("10.1.0.1", 3, 20*ms, 10)
	fresh.Cookie, fresh.MPFlags = 7, observe.FlagJoinLoc|observe.FlagFullyEst
	w.conn.Subflows = append(w.conn.Subflows, fresh)
	if c := caps(w.holdRound(500e3, 40*ms)); len(c) != 0 {
		t.Fatalf("preferred back: caps %v", c)
	}
	// The next outage; the fresh subflow shows first as the daemon's view
	// adds it on its establishment event (the SYN/ACK), before any sample
	// did: no cookie, no RTT, no flags. Its join may not be complete, so
	// the others are held back, not lifted.
	w.conn.Subflows = w.conn.Subflows[:1]
	delete(w.ifaces, "wifi")
	for range 11 {
		acts = w.holdRound(500e3, 40*ms)
	}
	if c := caps(acts); c["10.2.0.1"] != 500e3 {
		t.Fatalf("a second into the second outage: caps %v", c)
	}
	w.ifaces["wifi"] = []netip.Addr{wifiAddr}
	w.holdRound(500e3, 40*ms) // the address is back: the re-add
	w.conn.Subflows = append(w.conn.Subflows, observe.Subflow{Local: netip.AddrPortFrom(wifiAddr, 4), Remote: remote,
		Token: 1, MPTCP: true, State: observe.TCPEstablished})
	if c := caps(w.holdRound(500e3, 40*ms)); c["10.2.0.1"] != 50e3 || len(c) != 1 {
		t.Fatalf("a preferred subflow known from its establishment event only: caps %v, want cell held back to a tenth (50000 B/s)", c)
	}
	// The sample shows the join incomplete: still held back; then complete.
	ev := &w.conn.Subflows[1]
	ev.Cookie, ev.MPFlags, ev.SRTT, ev.MinRTT = 9, observe.FlagJoinLoc, 20*ms, 20*ms
	if c := caps(w.holdRound(500e3, 40*ms)); c["10.2.0.1"] != 50e3 {
		t.Fatalf("the sample shows the join incomplete: caps %v, want the tenth still", c)
	}
	ev.MPFlags |= observe.FlagFullyEst
	if c := caps(w.holdRound(500e3, 40*ms)); len(c) != 0 {
		t.Fatalf("the join complete: caps %v, want none", c)
	}
	// A connection that never carried on the preferred path is not held.
	w2 := newReopenWorld(t, Env{})
	delete(w2.ifaces, "wifi")
	w2.conn.Subflows = w2.conn.Subflows[:1]
	for range 20 {
		acts = w2.holdRound(500e3, 40*ms)
	}
	if c := caps(acts); len(c) != 0 {
		t.Fatalf("never on the preferred path: caps %v", c)
	}
}

func TestPreferHoldsNothingWithoutAQueueOrPastItsTime(t *testing.T) {
	run := func(t *testing.T, w *reopenWorld, srtt time.Duration, rounds int) map[string]uint64 {
		t.Helper()
		w.decide()
		w.stallWifi()
		var got map[string]uint64
		for range rounds {
			got = caps(w.holdRound(500e3, srtt))
		}
		return got
	}
	t.Run("no queue", func(t *testing.T) {
		// SRTT under a quarter above the minimum: the application, not
		// the path, sets the rate.
		if c := run(t, newReopenWorld(t, Env{}), 24*ms, 30); len(c) != 0 {
			t.Fatalf("caps %v", c)
		}
	})
	t.Run("outage past holdFor", func(t *testing.T) {
		w := newReopenWorld(t, Env{})
		if c := run(t, w, 40*ms, 20); len(c) != 1 {
			t.Fatalf("2 s in: caps %v, want one", c)
		}
		for range 80 {
			w.holdRound(500e3, 40*ms)
		}
		if c := caps(w.holdRound(500e3, 40*ms)); len(c) != 0 {
			t.Fatalf("%v into the outage: caps %v, want lifted", holdFor, c)
		}
	})
	t.Run("slower than δ, not out", func(t *testing.T) {
		// The preferred path is viable, then its RTT goes past δ: the
		// kernel's default, and nothing held.
		w := newReopenWorld(t, Env{})
		w.p.RTTWindow = 0
		w.decide()
		w.conn.Subflows[1].SRTT = 200 * ms
		var got map[string]uint64
		for range 30 {
			got = caps(w.holdRound(500e3, 40*ms))
		}
		if st := w.status(); st.State != "deactivated" || len(got) != 0 {
			t.Fatalf("state %s, caps %v", st.State, got)
		}
	})
	t.Run("a join that does not complete", func(t *testing.T) {
		w := newReopenWorld(t, Env{})
		if c := run(t, w, 40*ms, 20); len(c) != 1 {
			t.Fatalf("2 s in: caps %v, want one", c)
		}
		w.conn.Subflows[1] = sf("10.1.0.1", 3, 20*ms, 10)
		w.conn.Subflows[1].Cookie, w.conn.Subflows[1].MPFlags = 7, observe.FlagJoinLoc
		held := caps(w.holdRound(500e3, 40*ms))["10.2.0.1"]
		for range 9 {
			w.holdRound(500e3, 40*ms)
		}
		// holdJoinMax (1 s) after the join was first seen: the cap again.
		if c := caps(w.holdRound(500e3, 40*ms)); c["10.2.0.1"] != held*holdJoinShare {
			t.Fatalf("join incomplete for %v: caps %v, want the cap (%d B/s) back", holdJoinMax, c, held*holdJoinShare)
		}
	})
	t.Run("hold_others off", func(t *testing.T) {
		w := newReopenWorld(t, Env{})
		w.p.HoldOthers = false
		if c := run(t, w, 40*ms, 30); len(c) != 0 {
			t.Fatalf("caps %v", c)
		}
		if w.p.Requirements().Limits {
			t.Fatal("hold_others off still asks for the rate caps' program")
		}
	})
	t.Run("never on the preferred path", func(t *testing.T) {
		// The connection's preferred subflow never was viable: it started
		// stalled (the path out from the start).
		w := newReopenWorld(t, Env{})
		w.stallWifi()
		var got map[string]uint64
		for range 30 {
			got = caps(w.holdRound(500e3, 40*ms))
		}
		if len(got) != 0 {
			t.Fatalf("caps %v", got)
		}
	})
}
