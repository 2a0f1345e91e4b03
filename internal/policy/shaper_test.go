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

// pathSim is a path for the shaper tests: every 100 ms round it delivers
// what its capacity and the cap the policy set allow. harm > 0: while it
// carries traffic, head-of-line blocking lets the connection deliver in
// order only harm × what the other paths carry.
type pathSim struct {
	local    netip.Addr
	capacity float64 // bit/s
	rtt      time.Duration
	harm     float64
}

// shapeSim runs a policy over simulated paths, round by round.
type shapeSim struct {
	t       *testing.T
	p       Policy
	paths   []pathSim
	sfs     []observe.Subflow
	caps    map[SubflowID]Action
	backups map[SubflowID]Action
	conn    uint64
	now     time.Time
	// trials counts the rounds a subflow became non-backup after being
	// backup.
	trials map[SubflowID]int
}

func newShapeSim(t *testing.T, p Policy, wnd uint32, paths ...pathSim) *shapeSim {
	s := &shapeSim{t: t, p: p, paths: paths, caps: map[SubflowID]Action{}, backups: map[SubflowID]Action{},
		now: time.Unix(100, 0), trials: map[SubflowID]int{}}
	for i, ps := range paths {
		sf := subflow(ps.local, uint16(40000+i), b1, 1)
		// A window of two bandwidth-delay products (as BBR keeps), at least 4.
		cwnd := uint32(max(4, 2*ps.capacity/8*ps.rtt.Seconds()/1448))
		sf.SRTT, sf.MinRTT, sf.SndWnd, sf.Cwnd, sf.MSS = ps.rtt, ps.rtt, wnd, cwnd, 1448
		if i > 0 {
			sf.LocalID = uint8(i)
		}
		s.sfs = append(s.sfs, sf)
	}
	return s
}

func (s *shapeSim) id(i int) SubflowID { return ID(s.sfs[i]) }

// run plays rounds of 100 ms.
func (s *shapeSim) run(rounds int) { runShapeSims(rounds, s) }

// runShapeSims plays rounds of 100 ms of several connections under one
// policy (theirs: the first's), each with its own token.
func runShapeSims(rounds int, sims ...*shapeSim) {
	p := sims[0].p
	for r := 0; r < rounds; r++ {
		snap := &Snapshot{Now: sims[0].now}
		for i, s := range sims {
			c := s.step()
			c.Token = uint32(7 + i)
			for j := range c.Subflows {
				c.Subflows[j].Token = c.Token
			}
			snap.Conns = append(snap.Conns, c)
		}
		got := map[string]int{}
		for _, a := range p.Decide(snap) {
			sims[a.Token-7].apply(a)
			got[fmt.Sprintf("%s %d %s", a.Kind, a.Token, a.Subflow)]++
		}
		// The shaper decides every subflow's backup flag and cap every
		// round: a missing decision would read as "not backup, no cap"
		// and pass the checks that the main path is never held back.
		for _, c := range snap.Conns {
			for _, sf := range c.Subflows {
				for _, k := range []Kind{Backup, Limit} {
					if key := fmt.Sprintf("%s %d %s", k, c.Token, ID(sf)); got[key] != 1 {
						sims[0].t.Fatalf("at %v: %d decisions %q, want one", snap.Now, got[key], key)
					}
				}
			}
		}
		for _, s := range sims {
			s.now = s.now.Add(100 * ms)
		}
	}
}

// step delivers one round's bytes and returns the connection.
func (s *shapeSim) step() *Conn {
	var others, harm float64
	harm = 1
	for i, ps := range s.paths {
		rate := ps.capacity
		if a, ok := s.caps[s.id(i)]; ok && a.Rate > 0 {
			rate = math.Min(rate, float64(a.Rate))
		}
		if s.backups[s.id(i)].Backup {
			rate = 0
		}
		s.sfs[i].BytesAcked += uint64(rate / 8 * 0.1)
		if ps.harm > 0 && rate > 0 {
			harm = ps.harm
		} else {
			others += rate
		}
	}
	s.conn += uint64(others * harm / 8 * 0.1)
	c := conn(s.sfs...)
	c.RemoteAddrs = nil
	c.BytesAcked = s.conn
	return c
}

func (s *shapeSim) apply(a Action) {
	switch a.Kind {
	case Limit:
		s.caps[a.Subflow] = a
	case Backup:
		if prev, ok := s.backups[a.Subflow]; ok && prev.Backup && !a.Backup {
			s.trials[a.Subflow]++
		}
		s.backups[a.Subflow] = a
	}
}

func TestShaperLetsANearEqualPathCarryAtOnce(t *testing.T) {
	// As near as the main path (by its handshake's RTT): it carries from
	// the start, as MPTCP would have it, and stays after its entry.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 4 * ms, 0})
	s.run(1)
	if s.backups[s.id(1)].Backup {
		t.Fatalf("a near joiner was set aside at once: %+v", s.backups[s.id(1)])
	}
	s.run(30)
	if b, c := s.backups[s.id(1)], s.caps[s.id(1)]; b.Backup || c.Rate != 0 || !strings.Contains(b.Reason, "of the main path's rate") {
		t.Fatalf("an equal path after 3 s: backup %v, cap %v (%s), want free after its entry", b.Backup, c.Rate, b.Reason)
	}
}

func TestShaperSetsAsideANearSlowJoinerAfterItsEntry(t *testing.T) {
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 4e6, 4 * ms, 0})
	s.run(8)
	// Judged by what it delivered (1%), not by its window per RTT (3%):
	// it has had more than 10 of its RTTs.
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "1% of the main path's") || !strings.Contains(b.Reason, "cannot add") {
		t.Fatalf("a 4 Mbit/s joiner beside 400 Mbit/s after 0.8 s: %+v (%s), want aside (1%% of the main path's rate, delivered; it cannot add 5%%)", b, b.Reason)
	}
}

func TestShaperTriesAFarJoinerBeforeItCarries(t *testing.T) {
	// Far (80 ms against 4 ms, more than 6× 10 ms: see entryRTT): aside
	// until its trial, which passes.
	s := newShapeSim(t, NewECF(), 64<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 80 * ms, 0})
	s.run(1)
	if !s.backups[s.id(1)].Backup {
		t.Fatalf("a far joiner carries traffic before its trial: %+v", s.backups[s.id(1)])
	}
	s.run(30)
	if b := s.backups[s.id(1)]; b.Backup || !strings.Contains(b.Reason, "passed its trial") {
		t.Fatalf("after 3 s: %+v, want in after its trial", b)
	}
}

func TestShaperKeepsAHarmfulPathAsideAndRetriesLessOften(t *testing.T) {
	// While the far 4 Mbit/s path carries anything, the connection delivers
	// half of what the main path carries.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 4e6, 80 * ms, 0.5})
	s.run(300) // 30 s
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "failed its trial") {
		t.Fatalf("after 30 s: %+v, want aside after a failed trial", b)
	}
	// Retries after 2, 4, 8, 16, 32 s (each after its trial): 4 in 30 s.
	if n := s.trials[s.id(1)]; n < 3 || n > 5 {
		t.Fatalf("%d trials in 30 s, want 3 to 5 (the wait doubles)", n)
	}
	if s.backups[s.id(0)].Backup || s.caps[s.id(0)].Rate != 0 {
		t.Fatalf("the main path was held back")
	}
}

func TestShaperSafetyNetSetsAsideAPathThatTurnsHarmful(t *testing.T) {
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 4 * ms, 0})
	s.run(40)
	if s.backups[s.id(1)].Backup {
		t.Fatalf("an equal path did not pass its trial")
	}
	s.paths[1].harm = 0.5
	for r := 0; r < 30 && !s.backups[s.id(1)].Backup; r++ {
		s.run(1)
		if r == 29 {
			t.Fatalf("a path that turned harmful still carries traffic 3 s later")
		}
	}
	if !strings.Contains(s.backups[s.id(1)].Reason, "it did without it") {
		t.Fatalf("reason %q", s.backups[s.id(1)].Reason)
	}
}

func TestShaperFarPathGetsWhatArrivesInTime(t *testing.T) {
	// 400 Mbit/s at 4 ms and at 400 ms (lag ≈ 202 ms). A 4 MiB window: by
	// the model nothing the far path sends arrives in time, so no cap
	// would help; what the connection delivers decides. Here it suffers
	// (head-of-line blocking): the far path stays aside.
	// Its first trial waits 25 of its RTTs (10 s).
	s := newShapeSim(t, NewECF(), 4<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 400 * ms, 0.3})
	s.run(95)
	if s.trials[s.id(1)] != 0 {
		t.Fatalf("a trial of a 400 ms path within 9.5 s")
	}
	s.run(30)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "failed its trial") {
		t.Fatalf("far path, 4 MiB window: %+v, want aside after its trial", b)
	}
	if n := s.trials[s.id(1)]; n != 1 || s.caps[s.id(1)].Rate != 0 {
		t.Fatalf("trials %d, cap %v: want one uncapped trial in 12.5 s", n, s.caps[s.id(1)].Rate)
	}
	// 16 MiB: (50 MB/s + r)(202 ms + 64 KiB/r) ≤ 0.9 × 16 MiB gives
	// r ≈ 23.7 MB/s ≈ 190 Mbit/s (198 without the bursts' wait).
	s = newShapeSim(t, NewECF(), 16<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 400 * ms, 0})
	s.run(130)
	c := s.caps[s.id(1)]
	if s.backups[s.id(1)].Backup || c.Rate < 180e6 || c.Rate > 195e6 {
		t.Fatalf("far path, 16 MiB window: backup %v cap %v (%s), want ≈ 190 Mbit/s", s.backups[s.id(1)].Backup, c.Rate, c.Reason)
	}
}

func TestInTimeRate(t *testing.T) {
	// Without bursts the bound is hw/lag − c; the bursts' wait lowers it,
	// and nothing fits when the main path alone fills the window.
	if r := inTimeRate(15.1e6, 202*ms, 50e6); r < 23e6 || r > 24.5e6 {
		t.Fatalf("r = %.3g B/s, want ≈ 23.7e6", r)
	}
	if r := inTimeRate(10e6, 202*ms, 50e6); r != 0 {
		t.Fatalf("main path fills the window: r = %.3g, want 0", r)
	}
}

func TestShaperWaitsForAWarmingInitialPath(t *testing.T) {
	// The connection starts on a far path (10 RTTs = 4 s of warm-up) and
	// a far one (7.5×) joins: no trial before the warm-up ends, and the
	// initial path is never held back.
	s := newShapeSim(t, NewECF(), 64<<20, pathSim{a1, 2e6, 400 * ms, 0}, pathSim{a2, 4e6, 3000 * ms, 0})
	s.run(35)
	if s.trials[s.id(1)] != 0 || !s.backups[s.id(1)].Backup {
		t.Fatalf("a trial during the initial path's warm-up")
	}
	if s.caps[s.id(0)].Rate != 0 || s.backups[s.id(0)].Backup {
		t.Fatalf("the warming initial subflow was held back")
	}
}

func TestShaperHoldsAJoinerUntilItsRTTIsKnown(t *testing.T) {
	// Seen first in a path-manager event (no RTT yet): aside; the next
	// sample shows it near, and it carries.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 4 * ms, 0})
	s.sfs[1].SRTT, s.sfs[1].MinRTT = 0, 0
	s.run(1)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "until its RTT is known") {
		t.Fatalf("a joiner with no RTT yet: %+v, want aside", b)
	}
	s.sfs[1].SRTT, s.sfs[1].MinRTT = 4*ms, 4*ms
	s.run(1)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("a near joiner once its RTT shows: %+v, want carrying", b)
	}
}

func TestShaperTrialsOfAJoinerThatCannotAddWaitLongest(t *testing.T) {
	// 4 Mbit/s beside 400 Mbit/s cannot add the 5% a trial asks for: set
	// aside after its entry, its first trial waits 16× the retry (32 s).
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 4e6, 4 * ms, 0})
	s.run(250) // 25 s
	b := s.backups[s.id(1)]
	if !b.Backup || !strings.Contains(b.Reason, "cannot add 5%") || !strings.Contains(b.Reason, "next trial in 32s") {
		t.Fatalf("after 25 s: %+v (%s), want aside with its trial in 32 s", b, b.Reason)
	}
	if n := s.trials[s.id(1)]; n != 0 {
		t.Fatalf("%d trials in 25 s, want none", n)
	}
}

func TestShaperFarNearerJoinerWaitsForTheMainPathsWarmUp(t *testing.T) {
	// A 4 ms joiner beside a 400 ms initial path that still warms up (10
	// RTTs: 4 s): MPTCP would give it the data first and starve the main
	// path's slow start.
	s := newShapeSim(t, NewECF(), 64<<20, pathSim{a1, 400e6, 400 * ms, 0}, pathSim{a2, 4e6, 4 * ms, 0})
	s.run(30)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "warms up: enters after") {
		t.Fatalf("after 3 s: %+v, want aside until the main path has warmed up", b)
	}
	s.run(20)
	if n := s.trials[s.id(1)]; n != 1 {
		t.Fatalf("after 5 s: entered %d times, want once (its entry, after the warm-up)", n)
	}
}

func TestShaperTellsNearFromFarAbove10ms(t *testing.T) {
	// Beside a path of no delay (its RTT 100 µs), a joiner at 50 ms is
	// near (under 6× 10 ms: below 10 ms a path's own queue is of the order
	// of its RTT) and carries at once; one at 70 ms is far and waits for
	// its trial. Under dynthresh as under ecf.
	for _, src := range []string{"name: ecf", "name: dynthresh"} {
		for rtt, near := range map[time.Duration]bool{50 * ms: true, 70 * ms: false} {
			s := newShapeSim(t, mustBuild(t, src, Env{}), 8<<20, pathSim{a1, 10e6, 100 * time.Microsecond, 0}, pathSim{a2, 10e6, rtt, 0})
			s.run(12)
			if b := s.backups[s.id(1)]; b.Backup == near {
				t.Fatalf("%q, a %v joiner beside a 100 µs path after 1.2 s: backup %v (%s), want near %v", src, rtt, b.Backup, b.Reason, near)
			}
		}
	}
	// A joiner of no delay beside a 50 ms path still warming up is not
	// far nearer (under 6× 10 ms): it carries at once; beside 400 ms it
	// waits (TestShaperFarNearerJoinerWaitsForTheMainPathsWarmUp).
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 10e6, 50 * ms, 0}, pathSim{a2, 10e6, 100 * time.Microsecond, 0})
	s.run(2)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("a 100 µs joiner beside a warming 50 ms path: backup (%s), want it carrying", b.Reason)
	}
}

func TestShaperComparesRTTsFromAMillisecond(t *testing.T) {
	// Two veths in one host: 1 and 15 µs. 15× apart, yet neither can hold
	// anything up: the joiner is near and carries at once.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, time.Microsecond, 0}, pathSim{a2, 400e6, 15 * time.Microsecond, 0})
	s.run(1)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("a 15 µs joiner beside a 1 µs path: %+v (%s), want it carrying", b, b.Reason)
	}
}

func TestShaperJoinBackupIsAKey(t *testing.T) {
	for src, want := range map[string]bool{"name: ecf": true, "name: dynthresh\njoin_backup: false": false, "name: dynthresh\nmode: shaped": true} {
		p := mustBuild(t, src, Env{})
		r, ok := p.(Requirer)
		if !ok {
			t.Fatalf("%q: %T states no requirements", src, p)
		}
		if got := r.Requirements().JoinBackup; got != want {
			t.Errorf("%q: joins as backup %v, want %v", src, got, want)
		}
	}
}

// The ProbeRTT rest reads BBR's state: it asks for the sampler that has it.
func TestShaperAsksForBBRStateWhereItReadsIt(t *testing.T) {
	for src, want := range map[string]bool{
		"name: ecf":                             true,
		"name: ecf\nprobe_rtt_rest: false":      false,
		"name: dynthresh":                       false,
		"name: dynthresh\nprobe_rtt_rest: true": true,
	} {
		if got := mustBuild(t, src, Env{}).(Requirer).Requirements().BBRState; got != want {
			t.Errorf("%q: asks for BBR's state %v, want %v", src, got, want)
		}
	}
}

func TestShaperSetsAsideThePathThatTurnedBadNotTheGoodOne(t *testing.T) {
	// Two equal paths; at 5 s the joiner's turns lossy: it delivers
	// little and holds the connection up. Its best rate of the last 30 s
	// is still the higher one, yet it is what goes aside, never the
	// initial path.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 20e6, 10 * ms, 0}, pathSim{a2, 21e6, 10 * ms, 0})
	s.run(50)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("an equal joiner after 5 s: %+v (%s), want it carrying", b, b.Reason)
	}
	s.paths[1].capacity, s.paths[1].harm = 1e6, 0.1
	aside := false
	for i := 0; i < 40; i++ {
		s.run(1)
		if b := s.backups[s.id(0)]; b.Backup {
			t.Fatalf("%d ms after the joiner's path turned bad: the initial path was set aside (%s)", 100*(i+1), b.Reason)
		}
		aside = aside || s.backups[s.id(1)].Backup
	}
	if !aside {
		t.Fatalf("4 s after its path turned bad the joiner was never set aside: %+v", s.backups[s.id(1)])
	}
}

func TestShaperSetsAsideAFarPathTheMainPathWaitsOn(t *testing.T) {
	// 100 ms against 40 ms: near enough to enter (within EntryFactor), far
	// enough to lag. It carries 40% of the main path's rate, so its entry
	// keeps it; but the main path sits idle (nothing in flight) while it
	// has data in flight: the connection waits on it. (The in-time gate
	// off: with this window the main path alone fills it within the lag,
	// which sets the path aside first; see TestShaperInTimeGate.)
	p := NewECF()
	p.sh.InTimeGate = false
	s := newShapeSim(t, p, 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 20e6, 100 * ms, 0})
	s.sfs[0].Unacked, s.sfs[1].Unacked = 0, 30
	s.run(10)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("after 1 s: %+v, want carrying (entered; 2 s of rounds needed before it is judged)", b)
	}
	s.run(30)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "the main path sat idle while it held data in 100%") {
		t.Fatalf("after 4 s: %+v, want aside (the main path waited on it)", b)
	}

	// The same path while the main path is busy (half its window in
	// flight): it stays.
	p = NewECF()
	p.sh.InTimeGate = false
	s = newShapeSim(t, p, 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 20e6, 100 * ms, 0})
	s.sfs[0].Unacked, s.sfs[1].Unacked = s.sfs[0].Cwnd/2, 30
	s.run(60)
	if b := s.backups[s.id(1)]; b.Backup || s.trials[s.id(1)] != 0 {
		t.Fatalf("main path busy, after 6 s: %+v, %d trials; want carrying", b, s.trials[s.id(1)])
	}
}

func TestShaperInTimeGate(t *testing.T) {
	// 50 Mbit/s at 40 ms beside 20 Mbit/s at 100 ms in a 256 KiB window:
	// the main path alone fills the window within the 70 ms the far one
	// lags (437 KiB), so whatever the far path carries holds the
	// connection up. The main path is busy (the held rule sees nothing).
	mk := func(p Policy) *shapeSim {
		s := newShapeSim(t, p, 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 20e6, 100 * ms, 0})
		s.sfs[0].Unacked, s.sfs[1].Unacked = s.sfs[0].Cwnd/2, 30
		return s
	}
	s := mk(NewECF())
	s.run(20)
	b := s.backups[s.id(1)]
	if !b.Backup || !strings.Contains(b.Reason, "no room: the main path's") || !strings.Contains(b.Reason, "it waits until the 256KiB window") {
		t.Fatalf("after 2 s: %+v, want aside: no room, waiting for the window or the main path's rate to change", b)
	}
	s.run(200)
	if n := s.trials[s.id(1)]; n != 0 || !s.backups[s.id(1)].Backup {
		t.Fatalf("20 s later: %d trials, %+v; want none while nothing changed", n, s.backups[s.id(1)])
	}
	// The window grows to 4 MiB: there is room, and a trial comes.
	for i := range s.sfs {
		s.sfs[i].SndWnd = 4 << 20
	}
	s.run(40)
	if n := s.trials[s.id(1)]; n == 0 {
		t.Fatalf("4 s after the window grew to 4 MiB: no trial (%+v)", s.backups[s.id(1)])
	}

	// dynthresh keeps the gate off (its Table 1 figures were measured
	// without it): the path carries.
	d := mk(NewDynThresh())
	d.run(40)
	if b := d.backups[d.id(1)]; b.Backup {
		t.Fatalf("dynthresh after 4 s: %+v, want carrying", b)
	}
}

func TestShaperStartsTheTrialsOfOneAddressTogether(t *testing.T) {
	// Two connections, each with a harmful far path from the same address,
	// set aside one second apart: under the kernel path manager one
	// connection's trial is every connection's, so the first waits for
	// the second's and both start in the same round.
	mk := func(p Policy) *shapeSim {
		s := newShapeSim(t, p, 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 20e6, 100 * ms, 0.5})
		s.sfs[0].Unacked, s.sfs[1].Unacked = 0, 30
		return s
	}
	p := NewECF()
	p.sh.Margin = 0.99 // the safety net out of the way: the held rule decides
	p.sh.InTimeGate = false
	a, b := mk(p), mk(p)
	b.sfs[0].Unacked = b.sfs[0].Cwnd / 2 // busy for now: not waiting on its far path
	runShapeSims(20, a, b)
	b.sfs[0].Unacked = 0
	started := map[*shapeSim]int{}
	for r := 0; r < 100 && len(started) < 2; r++ {
		runShapeSims(1, a, b)
		for _, s := range []*shapeSim{a, b} {
			if _, ok := started[s]; !ok && s.trials[s.id(1)] > 0 {
				started[s] = r
			}
		}
	}
	if !strings.Contains(a.backups[a.id(1)].Reason+b.backups[b.id(1)].Reason, "on trial") || len(started) != 2 {
		t.Fatalf("trials started in rounds %v, want both within 10 s", started)
	}
	if started[a] != started[b] {
		t.Fatalf("trials started in rounds %d and %d, want the same round", started[a], started[b])
	}
}

func TestShaperJudgesTheTrialsOfOneAddressTogether(t *testing.T) {
	// Two connections' far paths from one address, set aside by the held
	// rule, on trial together. Alone, the first would pass (its
	// connection delivers 40% more with it); the second's connection
	// loses 70% with it. Judged by what both delivered in all, both fail.
	mk := func(p Policy, harm float64) *shapeSim {
		s := newShapeSim(t, p, 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 20e6, 100 * ms, harm})
		s.sfs[0].Unacked, s.sfs[1].Unacked = 0, 30
		return s
	}
	p := NewECF()
	p.sh.Margin = 0.99 // the safety net out of the way
	p.sh.InTimeGate = false
	a, b := mk(p, 0), mk(p, 0.3)
	for r := 0; r < 100 && a.trials[a.id(1)] == 0; r++ {
		runShapeSims(1, a, b)
	}
	if a.trials[a.id(1)] != 1 || b.trials[b.id(1)] != 1 {
		t.Fatalf("trials %d and %d, want one each, together", a.trials[a.id(1)], b.trials[b.id(1)])
	}
	for r := 0; r < 30 && !a.backups[a.id(1)].Backup; r++ {
		runShapeSims(1, a, b)
	}
	for _, s := range []*shapeSim{a, b} {
		if bk := s.backups[s.id(1)]; !bk.Backup || !strings.Contains(bk.Reason, "failed its trial: the 2 connections on trial from 10.2.0.1") {
			t.Fatalf("after the trial: %+v, want aside by the group's verdict", bk)
		}
	}
}

func TestShaperTrialLastsTrialRTTs(t *testing.T) {
	// A far joiner with a 100 ms RTT, which helps: its trial lasts 3 of
	// its RTTs by default (after one RTT for its data to come back), 10
	// with trial_rtts: 10.
	for src, want := range map[string][2]int{"name: ecf": {4, 6}, "name: ecf\ntrial_rtts: 10": {11, 13}} {
		p := mustBuild(t, src, Env{})
		s := newShapeSim(t, p, 64<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 400e6, 100 * ms, 0})
		rounds := 0
		for r := 0; r < 60; r++ {
			s.run(1)
			for _, c := range p.(*ECF).Status().([]ShapeConnStatus) {
				for _, sf := range c.Subflows {
					if sf.Subflow == s.id(1).String() && sf.State == shTrial {
						rounds++
					}
				}
			}
		}
		if b := s.backups[s.id(1)]; b.Backup || !strings.Contains(b.Reason, "passed its trial") {
			t.Fatalf("%q: after 6 s %+v, want in after its trial", src, b)
		}
		if rounds < want[0] || rounds > want[1] {
			t.Errorf("%q: on trial for %d rounds of 100 ms, want %d to %d", src, rounds, want[0], want[1])
		}
	}
}

func TestShaperSafetyNetPausesAroundProbeRTT(t *testing.T) {
	// Two near paths under BBR, 40 and 5 Mbit/s, both carrying. The main
	// path runs a ProbeRTT: its window at 4 segments, nothing delivered
	// for 600 ms (the lab's ProbeRTT and what waited behind it). The
	// connection's 1 s rate stays under 90% of the main path's alone for
	// over a second: the safety net's trigger. With
	// the pause the other path stays; without it, it goes aside.
	for _, pause := range []bool{true, false} {
		p := NewECF()
		p.sh.ProbeRTTPause = pause
		p.sh.SlowShare = 0.05 // (it stays past its entry)
		s := newShapeSim(t, p, 8<<20, pathSim{a1, 40e6, 10 * ms, 0}, pathSim{a2, 5e6, 10 * ms, 0})
		for i := range s.sfs {
			s.sfs[i].CC = "bbr"
		}
		s.run(50)
		if b := s.backups[s.id(1)]; b.Backup {
			t.Fatalf("pause %v: the joiner after 5 s: %+v, want carrying", pause, b)
		}
		main := 0
		if st := p.Status().([]ShapeConnStatus); st[0].Main == s.id(1).String() {
			main = 1
		}
		cwnd, rate := s.sfs[main].Cwnd, s.paths[main].capacity
		s.sfs[main].Cwnd, s.paths[main].capacity, s.paths[1-main].capacity = 4, 0, 0
		s.run(6)
		s.sfs[main].Cwnd, s.paths[main].capacity, s.paths[1-main].capacity = cwnd, rate, 5e6
		aside := false
		for i := 0; i < 20; i++ {
			s.run(1)
			aside = aside || s.backups[s.id(1-main)].Backup
		}
		if aside == pause {
			t.Errorf("probe_rtt_pause %v: the other path set aside %v after the main path's ProbeRTT (%s)", pause, aside, s.backups[s.id(1-main)].Reason)
		}
	}
}

func TestShaperDoesNotJudgeAJoinerMPTCPHasGivenNothing(t *testing.T) {
	// Two equal, fast paths: MPTCP's scheduler keeps the first while its
	// window has room and gives the joiner nothing for a while (seen over
	// two veths in CI). A joiner never tried is not slow: its entry
	// starts with its first data, and then it is judged as any other.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 0, 4 * ms, 0})
	s.run(20)
	if b := s.backups[s.id(1)]; b.Backup {
		t.Fatalf("a joiner given no data for 2 s was set aside: %s", b.Reason)
	}
	s.paths[1].capacity = 400e6
	s.run(30)
	if b := s.backups[s.id(1)]; b.Backup || !strings.Contains(b.Reason, "of the main path's rate") {
		t.Fatalf("once given data at the main path's rate: backup %v (%s), want free after its entry", b.Backup, b.Reason)
	}
	// The same wait, then a slow path: judged on what it carries once it
	// has data, and set aside.
	s = newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 400e6, 4 * ms, 0}, pathSim{a2, 0, 4 * ms, 0})
	s.run(20)
	s.paths[1].capacity = 4e6
	s.run(8)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "1% of the main path's") {
		t.Fatalf("a 4 Mbit/s joiner beside 400 Mbit/s, 0.8 s after its first data: %+v (%s), want aside", b, b.Reason)
	}
}

func TestShaperKeepsALossBasedMainPathFromAFarJoinerWithNoGainInTime(t *testing.T) {
	// ecf-50-10-1m: 50 Mbit/s at 40 ms RTT, 10 Mbit/s at 100 ms (near by
	// entry_factor, far by slow_factor), a 632 KiB window: the model lets
	// nothing of the joiner's arrive in time. Under CUBIC it never enters
	// (its entry drained the main path's window and CUBIC took seconds to
	// grow it back); under BBR it enters and is judged by what it carries.
	for _, cc := range []string{"cubic", "bbr"} {
		s := newShapeSim(t, NewECF(), 632<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 10e6, 100 * ms, 0})
		for i := range s.sfs {
			s.sfs[i].CC = cc
		}
		s.run(20)
		b := s.backups[s.id(1)]
		if cc == "cubic" && (!b.Backup || !strings.Contains(b.Reason, "no gain in time") || s.trials[s.id(1)] > 0) {
			t.Fatalf("under cubic after 2 s: backup %v, %d trials (%s), want aside from the start: no gain in time", b.Backup, s.trials[s.id(1)], b.Reason)
		}
		if cc == "bbr" && s.trials[s.id(1)] == 0 {
			t.Fatalf("under bbr after 2 s: backup %v (%s), never carried; want it entered", b.Backup, b.Reason)
		}
	}
}

func TestShaperKeepsANearJoinerUnderSlowShareThatAddsInTime(t *testing.T) {
	// 50 and 5 Mbit/s, both at 40 ms: the joiner carries 20% of the
	// main path's rate (its window per RTT: twice its BDP, as BBR keeps),
	// under slow_share (25%). With an 8 MiB window what
	// it carries arrives in time and it adds more than gain (5%): it
	// stays. With 256 KiB the main path alone fills the window: aside.
	s := newShapeSim(t, NewECF(), 8<<20, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 5e6, 40 * ms, 0})
	s.run(30)
	if b := s.backups[s.id(1)]; b.Backup || !strings.Contains(b.Reason, "under slow_share, but it adds") {
		t.Fatalf("8 MiB window after 3 s: backup %v (%s), want it kept: it adds and arrives in time", b.Backup, b.Reason)
	}
	if n := s.trials[s.id(1)]; n != 0 {
		t.Fatalf("8 MiB window: it went back to work %d times, want never set aside", n)
	}
	s = newShapeSim(t, NewECF(), 256<<10, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 5e6, 40 * ms, 0})
	s.run(8)
	if b := s.backups[s.id(1)]; !b.Backup || !strings.Contains(b.Reason, "20% of the main path's") {
		t.Fatalf("256 KiB window after its entry: backup %v (%s), want aside at its share (20%%)", b.Backup, b.Reason)
	}
}

func TestShaperFarIsJudgedFromAMillisecond(t *testing.T) {
	// Far (what it carries is capped to what arrives in time, and the
	// main path may wait on it) compares base RTTs floored at 1 ms, not
	// at entryRTT's 10 ms: 5 ms beside 2 ms is far, 1.2 ms beside 1 ms
	// is not.
	p := newShaper()
	sf := func(rtt time.Duration) observe.Subflow { return observe.Subflow{SRTT: rtt, MinRTT: rtt} }
	if !p.far(sf(5*ms), sf(2*ms)) {
		t.Fatalf("5 ms beside a 2 ms main path: not far")
	}
	if p.far(sf(1200*time.Microsecond), sf(time.Millisecond)) {
		t.Fatalf("1.2 ms beside a 1 ms main path: far")
	}
}

func TestShaperRestsAFarPathThroughItsProbeRTT(t *testing.T) {
	// ecf-50-10-1m's paths, both under BBR: the far one carries, and BBR's
	// state is played round by round (its min_rtt filter's age and mode).
	for _, tc := range []struct {
		name string
		// after the rest begins: what BBR does each round (its mode and
		// the filter's age), and the rounds after which the rest is over
		play  func(round int, start time.Duration) (observe.BBRMode, time.Duration)
		ends  int
		rests bool
	}{
		// ProbeRTT begins a round after the rest and is seen; the rest
		// ends 200 ms and one SRTT (100 ms) later.
		{name: "probe", play: func(r int, start time.Duration) (observe.BBRMode, time.Duration) {
			if r >= 1 && r < 8 {
				return observe.BBRProbeRTT, time.Duration(r-1) * 100 * ms
			}
			return observe.BBRProbeBW, start + time.Duration(r)*100*ms
		}, ends: 4, rests: true},
		// The filter is refreshed without a ProbeRTT (a lower RTT): the
		// rest ends at once.
		{name: "refreshed", play: func(r int, start time.Duration) (observe.BBRMode, time.Duration) {
			if r >= 2 {
				return observe.BBRProbeBW, 50 * ms
			}
			return observe.BBRProbeBW, start + time.Duration(r)*100*ms
		}, ends: 2, rests: true},
		// Nothing shows (it drained before its filter expired): it comes
		// back after a second and an SRTT.
		{name: "nothing", play: func(r int, start time.Duration) (observe.BBRMode, time.Duration) {
			return observe.BBRProbeBW, start + time.Duration(r)*100*ms
		}, ends: 11, rests: true},
		{name: "off", rests: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := NewECF()
			p.sh.SlowShare = 0.05 // (it stays past its entry)
			p.sh.ProbeRTTRest = tc.rests
			s := newShapeSim(t, p, 1<<20, pathSim{a1, 50e6, 40 * ms, 0}, pathSim{a2, 10e6, 100 * ms, 0})
			for i := range s.sfs {
				s.sfs[i].CC = "bbr"
				s.sfs[i].BBR = observe.BBRState{Known: true, Mode: observe.BBRProbeBW}
			}
			age := func(i int, a time.Duration) {
				s.sfs[i].BBR = observe.BBRState{Known: true, Mode: observe.BBRProbeBW, MinRTTAge: a}
			}
			// Until the far path carries (its entry over), both filters fresh.
			s.run(40)
			if b := s.backups[s.id(1)]; b.Backup {
				t.Fatalf("the far path does not carry after 4 s: %s", b.Reason)
			}
			// The main path's filter expires first: it never rests.
			for r := 0; r < 3; r++ {
				age(0, 9800*ms+time.Duration(r)*100*ms)
				age(1, 8*time.Second+time.Duration(r)*100*ms)
				s.run(1)
				if b := s.backups[s.id(0)]; b.Backup {
					t.Fatalf("the main path set aside near its ProbeRTT: %s", b.Reason)
				}
			}
			age(0, 100*ms)
			// 8.3 s to 9.8 s: its filter expires in 1.7 s down to 200 ms,
			// more than its SRTT: it carries.
			for a := 8300 * ms; a <= 9800*ms; a += 100 * ms {
				age(1, a)
				s.run(1)
				if b := s.backups[s.id(1)]; b.Backup {
					t.Fatalf("set aside %v before its filter expires (SRTT 100 ms): %s", 10*time.Second-a, b.Reason)
				}
			}
			// 100 ms before: the rest begins.
			age(1, 9900*ms)
			s.run(1)
			b := s.backups[s.id(1)]
			if !tc.rests {
				if b.Backup {
					t.Fatalf("probe_rtt_rest off, yet it rests: %s", b.Reason)
				}
				return
			}
			if !b.Backup || !strings.Contains(b.Reason, "rests through BBR's ProbeRTT") {
				t.Fatalf("100 ms before its filter expires: %+v, want resting", b)
			}
			for r := 1; r <= tc.ends; r++ {
				mode, a := tc.play(r, 9900*ms)
				s.sfs[1].BBR = observe.BBRState{Known: true, Mode: mode, MinRTTAge: a}
				s.run(1)
				if got := s.backups[s.id(1)].Backup; got != (r < tc.ends) {
					t.Fatalf("round %d of the rest (%v, filter %v old): backup %v, want %v (%s)", r, mode, a, got, r < tc.ends, s.backups[s.id(1)].Reason)
				}
			}
		})
	}
}
