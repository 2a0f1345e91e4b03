package check

import (
	"slices"
	"testing"
)

func passing() *Report {
	return &Report{
		RTT:        []RTTResult{{DelayMs: 10, Pass: true}, {DelayMs: 50, Pass: true}},
		Goodput:    []GoodputResult{{RateMbit: 10, Pass: true}},
		Loss:       []LossResult{{ConfiguredPct: 1, Pass: true}},
		Outage:     OutageResult{ConfiguredS: 2, Pass: true},
		Concurrent: []GoodputResult{{RateMbit: 400, Pass: true}, {RateMbit: 400, Pass: true}},
		Pass:       true,
	}
}

func TestMissedNamesEveryMissedTarget(t *testing.T) {
	if m := passing().Missed(); len(m) != 0 {
		t.Fatalf("all met, but Missed = %v", m)
	}
	r := passing()
	r.RTT[1].Pass = false
	r.Goodput[0].Pass = false
	r.Loss[0].Pass = false
	r.Outage.Pass = false
	r.Concurrent[1].Pass = false
	want := []string{"RTT at 50 ms delay", "rate 10 mbit", "loss 1%", "outage 2 s", "path 2 of 2 at once at 400 mbit"}
	if got := r.Missed(); !slices.Equal(got, want) {
		t.Fatalf("Missed = %q, want %q", got, want)
	}
}
