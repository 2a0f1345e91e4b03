package world

import (
	"testing"
	"time"

	"mpsteer/internal/lab/linkemu"
)

// A link's outages draw their jitter alike in both directions and in
// every variant of a round, and differently from round to round and
// link to link.
func TestOutageSeeds(t *testing.T) {
	sched := []linkemu.Outage{{At: time.Second, For: time.Second, Jitter: 500 * time.Millisecond}, {At: 5 * time.Second, For: time.Second}}
	link := func(round, i int) *emuLink {
		return &emuLink{outageSeed: outageSeed(&Plan{Seed: 1, Round: round}, i)}
	}
	up, down := link(2, 0).seeded(sched), link(2, 0).seeded(sched)
	if up[0].Seed != down[0].Seed || up[1].Seed != down[1].Seed {
		t.Fatalf("directions seeded apart: %+v, %+v", up, down)
	}
	if up[0].Seed == up[1].Seed {
		t.Fatalf("two schedules of a link share a seed: %+v", up)
	}
	if sched[0].Seed != 0 {
		t.Fatal("seeding changed the plan's schedule")
	}
	for _, other := range []*emuLink{link(3, 0), link(2, 1)} {
		if s := other.seeded(sched); s[0].Seed == up[0].Seed {
			t.Fatalf("round 2 link 0 and %d share a seed", s[0].Seed)
		}
	}
}
