package policy

import (
	"strings"
	"testing"
	"time"
)

// twopath-short's 5/15 Mbit/s case with the slow path of no delay: its
// BBR paces the startup from a handshake of half a millisecond (648
// Mbit/s) into a queue of its own (SRTT 48 ms over a minimum of 0.5 ms);
// the 15 Mbit/s joiner at 50 ms enters.
func guardSim(t *testing.T, p Policy) *shapeSim {
	s := newShapeSim(t, p, 8<<20, pathSim{a1, 5e6, 500 * time.Microsecond, 0}, pathSim{a2, 15e6, 50 * ms, 0})
	for i := range s.sfs {
		s.sfs[i].CC = "bbr"
	}
	s.sfs[0].SRTT, s.sfs[0].PacingRate, s.sfs[0].DeliveryRate = 48*ms, 648e6/8, 4.8e6/8
	return s
}

func TestShaperStartupGuardHoldsAQueuingPathWhileAJoinerStarts(t *testing.T) {
	s := guardSim(t, NewDynThresh())
	s.run(2)
	// Held to 125% of what it delivers: the most of its tcp_info delivery
	// rate and its measured rate (the sim's 5 Mbit/s).
	if c := s.caps[s.id(0)]; c.Rate != 6.25e6 || !strings.Contains(c.Reason, "startup guard") {
		t.Fatalf("the queuing path while the joiner starts: cap %v (%s), want 6.25 Mbit/s by the startup guard", c.Rate, c.Reason)
	}
	if c := s.caps[s.id(1)]; c.Rate != 0 {
		t.Fatalf("the joiner (no queue of its own) capped at %v: %s", c.Rate, c.Reason)
	}
	// What it delivers falls: the cap keeps the most it delivered (a cap
	// that followed it down would hold the path below what it carries).
	s.paths[0].capacity, s.sfs[0].DeliveryRate = 2e6, 2e6/8
	s.run(3)
	if c := s.caps[s.id(0)]; c.Rate != 6.25e6 {
		t.Fatalf("after its rate fell: cap %v, want 6.25 Mbit/s kept", c.Rate)
	}
	// The joiner is young for 16 of its RTTs (800 ms) from its entry: then
	// the cap is lifted, queue or not.
	s.run(5)
	if c := s.caps[s.id(0)]; c.Rate != 0 {
		t.Fatalf("1 s after the join: cap %v (%s), want none", c.Rate, c.Reason)
	}
}

// The guard holds the queuing path in the round the joiner may first
// carry, though the joiner is listed after it (every subflow's state is
// noted before any guard asks whether another is young).
func TestShaperStartupGuardActsInTheJoinersFirstRound(t *testing.T) {
	s := guardSim(t, NewDynThresh())
	for round := 1; round <= 10; round++ {
		s.run(1)
		if b, ok := s.backups[s.id(1)]; !ok || b.Backup {
			if c := s.caps[s.id(0)]; c.Rate != 0 {
				t.Fatalf("round %d: the queuing path capped (%s) while the joiner may not carry", round, c.Reason)
			}
			continue
		}
		// 125% of what it delivers: in the first round its tcp_info
		// delivery rate (4.8 Mbit/s; its measured rate is not known yet).
		if c := s.caps[s.id(0)]; c.Rate != 6e6 || !strings.Contains(c.Reason, "startup guard") {
			t.Fatalf("round %d, the joiner's first that it may carry: the queuing path's cap %v (%s), want 6 Mbit/s by the startup guard", round, c.Rate, c.Reason)
		}
		return
	}
	t.Fatal("the joiner never came out of backup in ten rounds")
}

func TestShaperStartupGuardLeavesWhatDoesNotQueueOrPaceAbove(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(s *shapeSim)
	}{
		{"no queue (SRTT within twice the minimum and 10 ms)", func(s *shapeSim) { s.sfs[0].SRTT = 10 * ms }},
		{"pacing at 4× what it delivers", func(s *shapeSim) { s.sfs[0].PacingRate = 4 * s.sfs[0].DeliveryRate }},
		{"nothing delivered yet", func(s *shapeSim) { s.sfs[0].DeliveryRate, s.paths[0].capacity = 0, 0 }},
	} {
		s := guardSim(t, NewDynThresh())
		tc.set(s)
		for i := 0; i < 8; i++ {
			s.run(1)
			if c := s.caps[s.id(0)]; c.Rate != 0 {
				t.Fatalf("%s: capped at %v (%s)", tc.name, c.Rate, c.Reason)
			}
		}
	}
	// Off by the key, and in ecf (its scenarios were measured without it).
	off := mustBuild(t, "name: dynthresh\nstartup_guard: false", Env{})
	for name, pol := range map[string]Policy{"startup_guard: false": off, "ecf": NewECF()} {
		s := guardSim(t, pol)
		s.run(4)
		if c := s.caps[s.id(0)]; c.Rate != 0 {
			t.Fatalf("%s: capped at %v (%s)", name, c.Rate, c.Reason)
		}
	}
}
