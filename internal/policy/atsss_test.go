package policy

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/observe"
)

// A small model of one MPTCP connection over two or more paths, for the
// ATSSS modes' decisions on a fake clock: each path has a capacity, an
// RTT and a loss rate; the sender (bulk, or at a demanded rate) sends on
// the subflows that are not backup (on backup ones only when no other is
// usable), each up to its capacity and its rate cap, a demanded rate
// spread over them in proportion to what each can carry. A path at its
// capacity and not held by a cap has data waiting (its window full). Every 100 ms the policy
// decides on a sample of the model and the model takes its decisions.
type simPath struct {
	addr     string
	capacity float64 // bytes/s
	rtt      time.Duration
	loss     float64
	down     bool
}

type atsssSim struct {
	t      *testing.T
	clk    time.Time
	start  time.Time
	paths  []*simPath
	demand float64 // bytes/s; 0: as much as the paths carry
	eng    *Engine

	backup                    []bool
	limit                     []float64
	acked, sent, retrans      []float64
	srtt                      []time.Duration
	rate                      []float64
	limited                   []bool
	plan                      Plan
	switchTimes               []time.Duration // when the path carrying most changed
	carrying                  int
	windowFrom                []float64 // acked at markShares
	reasons                   map[int]string
	backupRounds, probeRounds []int
}

func mbitps(m float64) float64 { return m * 1e6 / 8 }

func newATSSSSim(t *testing.T, p Policy, paths ...*simPath) *atsssSim {
	n := len(paths)
	s := &atsssSim{t: t, clk: time.Unix(1000, 0), paths: paths, eng: &Engine{Policies: []Policy{p}},
		backup: make([]bool, n), limit: make([]float64, n), acked: make([]float64, n), sent: make([]float64, n),
		retrans: make([]float64, n), srtt: make([]time.Duration, n), rate: make([]float64, n), limited: make([]bool, n),
		carrying: -1, reasons: map[int]string{}, backupRounds: make([]int, n), probeRounds: make([]int, n)}
	s.start = s.clk
	for i, pa := range paths {
		s.srtt[i] = pa.rtt
	}
	s.markShares()
	return s
}

func (s *atsssSim) subflows() []observe.Subflow {
	var out []observe.Subflow
	for i, p := range s.paths {
		sf := observe.Subflow{Local: netip.AddrPortFrom(netip.MustParseAddr(p.addr), uint16(40000+i)), Remote: netip.MustParseAddrPort("10.9.0.2:443"),
			Token: 1, SRTT: s.srtt[i], Cwnd: 100, Unacked: 10, MSS: 1448, MPTCP: true, State: observe.TCPEstablished,
			BytesAcked: uint64(s.acked[i]), BytesSent: uint64(s.sent[i]), BytesRetrans: uint64(s.retrans[i]), BackupLocal: s.backup[i]}
		if s.limited[i] {
			sf.Unacked = 100
		}
		if p.down {
			sf.Unacked, sf.LastAckRecv, sf.Backoff = 50, time.Second, 1
		}
		out = append(out, sf)
	}
	return out
}

// step runs one round: a decision on the current sample, then 100 ms of
// traffic under it.
func (s *atsssSim) step() {
	sfs := s.subflows()
	c := &Conn{Token: 1, Subflows: sfs, Local: sfs[0].Local, Remote: sfs[0].Remote, Established: true}
	s.plan = s.eng.Decide(&Snapshot{Now: s.clk, Sampled: s.clk, Conns: []*Conn{c}})
	for i, sf := range sfs {
		d, ok := s.plan.Backup[ID(sf)]
		s.backup[i] = ok && d.Backup
		if ok {
			s.reasons[i] = d.Reason
			if strings.Contains(d.Reason, "probe") {
				s.probeRounds[i]++
			}
		}
		if s.backup[i] {
			s.backupRounds[i]++
		}
		s.limit[i] = 0
		if l, ok := s.plan.Limits[ID(sf)]; ok && l.Rate > 0 {
			s.limit[i] = float64(l.Rate) / 8
		}
	}
	n := len(s.paths)
	can := make([]float64, n)
	usable := false
	for i, p := range s.paths {
		if !p.down && !s.backup[i] {
			usable = true
		}
	}
	for i, p := range s.paths {
		if p.down || (s.backup[i] && usable) {
			continue
		}
		can[i] = p.capacity
		if s.limit[i] > 0 {
			can[i] = math.Min(can[i], s.limit[i])
		}
	}
	for i := range s.rate {
		s.rate[i] = can[i]
	}
	if s.demand > 0 {
		// Water-filling: the demand spread in proportion to what each
		// path can carry, what one cannot take going to the others.
		left := s.demand
		open := map[int]bool{}
		for i := range can {
			s.rate[i] = 0
			if can[i] > 0 {
				open[i] = true
			}
		}
		for left > 1e-6 && len(open) > 0 {
			var sum float64
			for i := range open {
				sum += can[i] - s.rate[i]
			}
			give := math.Min(left, sum)
			for i := range open {
				add := give * (can[i] - s.rate[i]) / sum
				s.rate[i] += add
			}
			left -= give
			for i := range open {
				if s.rate[i] >= can[i]-1e-6 {
					delete(open, i)
				}
			}
			if give >= sum {
				break
			}
		}
	}
	for i, p := range s.paths {
		got := s.rate[i] * 0.1
		s.acked[i] += got
		if got > 0 {
			sent := got / (1 - p.loss)
			s.sent[i] += sent
			s.retrans[i] += sent - got
			s.srtt[i] = p.rtt
		}
		held := s.limit[i] > 0 && s.limit[i] < p.capacity
		s.limited[i] = got > 0 && s.rate[i] >= can[i]-1 && !held && can[i] == p.capacity
	}
	most := -1
	for i := range s.rate {
		if s.rate[i] > 0 && (most < 0 || s.rate[i] > s.rate[most]) {
			most = i
		}
	}
	if most != s.carrying {
		s.switchTimes = append(s.switchTimes, s.clk.Sub(s.start))
		s.carrying = most
	}
	s.clk = s.clk.Add(100 * time.Millisecond)
}

func (s *atsssSim) run(d time.Duration) {
	for end := s.clk.Add(d); s.clk.Before(end); {
		s.step()
	}
}

// markShares starts counting the bytes afresh (shares() counts from here).
func (s *atsssSim) markShares() {
	s.windowFrom = append([]float64(nil), s.acked...)
	for i := range s.backupRounds {
		s.backupRounds[i], s.probeRounds[i] = 0, 0
	}
}

func (s *atsssSim) shares() []float64 {
	var total float64
	out := make([]float64, len(s.paths))
	for i := range s.paths {
		out[i] = s.acked[i] - s.windowFrom[i]
		total += out[i]
	}
	for i := range out {
		if total > 0 {
			out[i] /= total
		}
	}
	return out
}

func (s *atsssSim) now() time.Duration { return s.clk.Sub(s.start) }

func mustATSSS(t *testing.T, src string, env Env) *ATSSS {
	t.Helper()
	p, err := parseATSSS(t, src, env)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func wifiCell(wifiMbit, cellMbit float64) []*simPath {
	return []*simPath{
		{addr: "10.1.0.1", capacity: mbitps(wifiMbit), rtt: 20 * ms},
		{addr: "10.2.0.1", capacity: mbitps(cellMbit), rtt: 40 * ms},
	}
}

// Load-balancing holds the split whatever the paths' capacities: the
// access that can carry least for its share is uncapped, the other held
// to the split against it.
func TestATSSSLoadBalancingHoldsTheSplit(t *testing.T) {
	for _, tc := range []struct {
		wifi, cell    int // target shares, %
		demand        float64
		wantTotalMbit float64 // what the connection can carry at the split
	}{
		{70, 30, 0, 66.7}, // cell binds: 20 / 0.3
		{50, 50, 0, 40},   // cell binds: 20 / 0.5 (wifi cannot be used more without breaking the split)
		{90, 10, 0, 55.6}, // wifi binds: 50 / 0.9
		{70, 30, mbitps(30), 30},
	} {
		t.Run(fmt.Sprintf("%d-%d-demand%.0f", tc.wifi, tc.cell, tc.demand*8/1e6), func(t *testing.T) {
			p := mustATSSS(t, atsssHead+fmt.Sprintf("  default: {mode: load-balancing, split: {wifi: %d%%, cell: %d%%}}\n", tc.wifi, tc.cell), Env{})
			s := newATSSSSim(t, p, wifiCell(50, 20)...)
			s.demand = tc.demand
			s.run(20 * time.Second)
			// A demand below what the accesses carry is spread by the
			// scheduler (here: in proportion to what each may carry), the
			// caps only bound it: held within a point and a half.
			tol, settled := 1.0, 0.5
			if tc.demand > 0 {
				tol, settled = 1.5, 1.5
			}
			sh := s.shares()
			if math.Abs(sh[0]*100-float64(tc.wifi)) > tol {
				t.Errorf("whole run: wifi %.1f%%, cell %.1f%%, want %d/%d within %g points", sh[0]*100, sh[1]*100, tc.wifi, tc.cell, tol)
			}
			s.markShares()
			s.run(10 * time.Second)
			sh = s.shares()
			if math.Abs(sh[0]*100-float64(tc.wifi)) > settled {
				t.Errorf("settled: wifi %.1f%%, want %d%% within %g points", sh[0]*100, tc.wifi, settled)
			}
			total := (s.rate[0] + s.rate[1]) * 8 / 1e6
			if math.Abs(total-tc.wantTotalMbit) > tc.wantTotalMbit*0.05 {
				t.Errorf("the connection carries %.1f Mbit/s, want %.1f", total, tc.wantTotalMbit)
			}
			if !strings.Contains(p.ConnSteering(1), "atsss rule default: load-balancing") {
				t.Errorf("status: %q", p.ConnSteering(1))
			}
		})
	}
}

// When an access becomes unavailable its share goes to the other; when
// it is back the split is held again, and a capacity change moves the
// binding access.
func TestATSSSLoadBalancingFollowsTheAccesses(t *testing.T) {
	p := mustATSSS(t, atsssHead+"  default: {mode: load-balancing, split: {wifi: 50%, cell: 50%}}\n", Env{})
	paths := wifiCell(50, 20)
	s := newATSSSSim(t, p, paths...)
	s.run(5 * time.Second)
	paths[1].down = true
	s.step()
	s.markShares()
	s.run(3 * time.Second)
	if sh := s.shares(); sh[0] < 0.99 {
		t.Fatalf("cell down: wifi carried %.1f%%, want everything", sh[0]*100)
	}
	if s.limit[0] != 0 {
		t.Errorf("wifi capped at %.0f B/s while it is alone", s.limit[0])
	}
	paths[1].down = false
	paths[1].capacity = mbitps(80) // now wifi binds: the split is 50+50
	s.run(5 * time.Second)
	s.markShares()
	s.run(10 * time.Second)
	sh := s.shares()
	if math.Abs(sh[0]-0.5) > 0.01 {
		t.Errorf("cell back at 80 Mbit/s: wifi %.1f%%, want 50%%", sh[0]*100)
	}
	if total := (s.rate[0] + s.rate[1]) * 8 / 1e6; total < 95 {
		t.Errorf("the connection carries %.1f Mbit/s, want about 100 (wifi's 50 twice)", total)
	}
}

// Smallest delay: the access with the smaller RTT carries; after its RTT
// rises above the other's the traffic moves within 1 s; within the margin
// it does not flap; an access that improves is found by its probes.
func TestATSSSSmallestDelay(t *testing.T) {
	p := mustATSSS(t, atsssHead+"  default: {mode: smallest-delay}\n", Env{})
	paths := wifiCell(50, 20)
	s := newATSSSSim(t, p, paths...)
	s.demand = mbitps(10)
	s.run(3 * time.Second)
	if s.backup[0] || !s.backup[1] && !strings.Contains(s.reasons[1], "probe") {
		t.Fatalf("wifi (20 ms) should carry, cell (40 ms) be backup: backup %v, %v", s.backup, s.reasons)
	}
	paths[0].rtt = 80 * ms
	at := s.now()
	for !(s.backup[0] && !s.backup[1]) {
		s.step()
		if s.now()-at > 2*time.Second {
			t.Fatalf("wifi's RTT rose to 80 ms at %v; still on it at %v: %v", at, s.now(), s.reasons)
		}
	}
	if d := s.now() - at; d > time.Second {
		t.Errorf("the traffic moved %v after the rise, want within 1 s", d)
	}
	// Back to 20 ms: wifi's probes see it.
	paths[0].rtt = 20 * ms
	at = s.now()
	for s.backup[0] {
		s.step()
		if s.now()-at > 5*time.Second {
			t.Fatalf("wifi back at 20 ms since %v, still backup at %v: %v", at, s.now(), s.reasons)
		}
	}
	// Within the margin (40 against 44 ms): no flapping.
	paths[0].rtt, paths[1].rtt = 44*ms, 40*ms
	s.run(3 * time.Second)
	n := len(s.switchTimes)
	s.run(10 * time.Second)
	if len(s.switchTimes) != n {
		t.Errorf("switches within the margin: %v", s.switchTimes[n:])
	}
}

// Priority-based: the low-priority access carries nothing while the
// high-priority one has room, the overflow when the application sends
// more than it holds, and everything it can under a bulk transfer.
func TestATSSSPriorityBased(t *testing.T) {
	src := atsssHead + "  default: {mode: priority-based, priority: [wifi, cell]}\n"
	s := newATSSSSim(t, mustATSSS(t, src, Env{}), wifiCell(50, 20)...)
	s.demand = mbitps(30)
	s.run(10 * time.Second)
	if s.acked[1] != 0 {
		t.Errorf("30 Mbit/s on a 50 Mbit/s high-priority access: cell carried %.0f B, want nothing", s.acked[1])
	}
	if !s.backup[1] || !strings.Contains(s.reasons[1], "carries nothing while the accesses before it have room") {
		t.Errorf("cell: backup %v, %q", s.backup[1], s.reasons[1])
	}
	// 60 Mbit/s: 10 overflow.
	s.demand = mbitps(60)
	s.run(5 * time.Second)
	s.markShares()
	s.run(10 * time.Second)
	sh := s.shares()
	if got := sh[1] * 100; math.Abs(got-100.0/6) > 4 {
		t.Errorf("60 Mbit/s over 50 + 20: cell carried %.1f%%, want the overflow, about %.1f%%", got, 100.0/6)
	}
	if tot := (s.acked[0] - s.windowFrom[0] + s.acked[1] - s.windowFrom[1]) * 8 / 1e6 / 10; tot < 57 {
		t.Errorf("the connection carried %.1f Mbit/s of the 60 demanded", tot)
	}
	// Back to 30: the overflow goes.
	s.demand = mbitps(30)
	s.run(3 * time.Second)
	s.markShares()
	s.run(5 * time.Second)
	if sh := s.shares(); sh[1] > 0 {
		t.Errorf("back to 30 Mbit/s: cell still carries %.1f%%", sh[1]*100)
	}
	// Bulk: both full.
	s.demand = 0
	s.run(5 * time.Second)
	if s.limit[1] != 0 || s.backup[1] {
		t.Errorf("bulk: cell backup %v, capped at %.0f B/s; want it uncapped", s.backup[1], s.limit[1])
	}
}

// Thresholds: an access whose RTT exceeds its threshold carries nothing
// but its probes until a probe finds it under the threshold less the
// hysteresis.
func TestATSSSThresholds(t *testing.T) {
	src := atsssHead + "  default: {mode: active-standby, active: wifi, thresholds: {rtt: 100ms, loss: 2%}}\n"
	p := mustATSSS(t, src, Env{})
	paths := wifiCell(50, 20)
	s := newATSSSSim(t, p, paths...)
	s.run(3 * time.Second)
	if s.backup[0] || !s.backup[1] {
		t.Fatalf("wifi active: backup %v (%v)", s.backup, s.reasons)
	}
	paths[0].rtt = 150 * ms
	s.run(500 * time.Millisecond)
	if !s.backup[0] || s.backup[1] {
		t.Fatalf("wifi over its RTT threshold: backup %v (%v)", s.backup, s.reasons)
	}
	s.markShares()
	for i := 0; i < 50; i++ {
		s.step()
		// A probe carries at most the probe rate (2 Mbit/s by default),
		// not the access's share; the cap stays between probes (what a
		// probe queued drains at it).
		if s.limit[0]*8 != 2e6 {
			t.Fatalf("wifi over its threshold capped at %.0f bit/s, want the default probe_rate 2 Mbit/s in every round (%q)", s.limit[0]*8, s.reasons[0])
		}
	}
	// Probes: one of 2 RTTs (300 ms here) a second.
	if s.probeRounds[0] == 0 || s.probeRounds[0] > 25 {
		t.Errorf("wifi probed in %d of 50 rounds while over its threshold", s.probeRounds[0])
	}
	if s.backupRounds[0]+s.probeRounds[0] < 50 {
		t.Errorf("wifi neither backup nor probed in %d rounds", 50-s.backupRounds[0]-s.probeRounds[0])
	}
	// 90 ms: under the threshold, but not by the hysteresis (20%: 80 ms).
	paths[0].rtt = 90 * ms
	s.run(3 * time.Second)
	if !s.backup[0] && !strings.Contains(s.reasons[0], "probe") {
		t.Errorf("wifi at 90 ms is back, before it is under 80 ms: %q", s.reasons[0])
	}
	paths[0].rtt = 20 * ms
	at := s.now()
	for s.backup[0] || strings.Contains(s.reasons[0], "probe") {
		s.step()
		if s.now()-at > 3*time.Second {
			t.Fatalf("wifi back at 20 ms since %v, not back at %v: %q", at, s.now(), s.reasons[0])
		}
	}
	if !s.backup[1] {
		t.Errorf("wifi back: cell should be standby again (%q)", s.reasons[1])
	}
	if s.limit[0] != 0 {
		t.Errorf("wifi back in use, still capped at %.0f bit/s", s.limit[0]*8)
	}
	// Loss over 2%: out too.
	paths[0].loss = 0.05
	s.run(2 * time.Second)
	if !s.backup[0] || !strings.Contains(s.reasons[0], "loss") {
		t.Errorf("wifi losing 5%%: backup %v, %q", s.backup[0], s.reasons[0])
	}
}

// Active-standby: the active access carries (whatever its RTT), the
// standby only while the active one is unavailable.
func TestATSSSActiveStandby(t *testing.T) {
	p := mustATSSS(t, atsssHead+"  default: {mode: active-standby, active: cell}\n", Env{})
	paths := wifiCell(50, 20)
	paths[1].rtt = 200 * ms // the active access is much slower: no matter
	s := newATSSSSim(t, p, paths...)
	s.run(3 * time.Second)
	if !s.backup[0] || s.backup[1] {
		t.Fatalf("cell active: backup %v (%v)", s.backup, s.reasons)
	}
	if sh := s.shares(); sh[1] < 0.99 {
		t.Errorf("cell carried %.1f%%, want at least 99%%", sh[1]*100)
	}
	if st := p.ConnSteering(1); !strings.Contains(st, "atsss rule default: active-standby — active cell carries") {
		t.Errorf("status %q", st)
	}
	paths[1].down = true
	s.step()
	s.step()
	if s.backup[0] || !s.backup[1] {
		t.Fatalf("cell stalled: backup %v (%v)", s.backup, s.reasons)
	}
	if st := p.ConnSteering(1); !strings.Contains(st, "standby wifi carries: active cell is unavailable") {
		t.Errorf("status %q", st)
	}
	paths[1].down = false
	s.step()
	s.step()
	if !s.backup[0] || s.backup[1] {
		t.Fatalf("cell back: backup %v (%v)", s.backup, s.reasons)
	}
	if !strings.Contains(s.reasons[1], "atsss rule default (active-standby)") {
		t.Errorf("reason %q does not name the rule and mode", s.reasons[1])
	}
}

// Every access over its threshold: the thresholds are set aside (the
// mode runs over all of them) and probes go on, so that an access back
// under its threshold is found and the other one is out of use again.
// A new access's first second of loss (its slow start's) does not count.
func TestATSSSThresholdsSetAsideAndWarmup(t *testing.T) {
	src := atsssHead + "  default: {mode: load-balancing, split: {wifi: 50%, cell: 50%}, thresholds: {rtt: 100ms, loss: 2%}}\n"
	p := mustATSSS(t, src, Env{})
	paths := wifiCell(50, 20)
	paths[0].loss = 0.2 // slow start's losses, for its first second
	s := newATSSSSim(t, p, paths...)
	s.run(500 * time.Millisecond)
	paths[0].loss = 0
	s.run(3 * time.Second)
	if s.backup[0] || s.backup[1] {
		t.Fatalf("the first second's loss took an access out: %v", s.reasons)
	}
	paths[0].rtt, paths[1].rtt = 150*ms, 150*ms
	s.run(2 * time.Second)
	if s.backup[0] || s.backup[1] || !strings.Contains(p.ConnSteering(1), "thresholds set aside") {
		t.Fatalf("both over: backup %v, %q", s.backup, p.ConnSteering(1))
	}
	paths[0].rtt = 20 * ms
	s.run(3 * time.Second)
	if s.backup[0] || !s.backup[1] && !strings.Contains(s.reasons[1], "probe") {
		t.Fatalf("wifi back under its threshold: backup %v (%v)", s.backup, s.reasons)
	}
}
