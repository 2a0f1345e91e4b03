package traffic

import (
	"math"
	"testing"
	"time"
)

func TestRateScheduleAllowance(t *testing.T) {
	steps := []RateStep{{0, 1000}, {2 * time.Second, 3000}}
	for _, tc := range []struct {
		at   time.Duration
		want float64
	}{{0, 0}, {time.Second, 1000}, {2 * time.Second, 2000}, {3 * time.Second, 5000}} {
		if got := allowed(steps, tc.at); math.Abs(got-tc.want) > 1e-9 {
			t.Errorf("allowed at %v: %v, want %v", tc.at, got, tc.want)
		}
	}
	if r := rateAt(steps, 1500*time.Millisecond); r != 1000 {
		t.Errorf("rate at 1.5 s: %v", r)
	}
	if r := rateAt(steps, 2*time.Second); r != 3000 {
		t.Errorf("rate at 2 s: %v", r)
	}
}
