package linkemu

import (
	"testing"
	"time"
)

func TestRecentCountsAWindow(t *testing.T) {
	var r recent
	ms := time.Millisecond
	base := 10 * time.Second
	for i := 0; i < 100; i++ { // one packet a millisecond for 100 ms
		v := Deliver
		if i%5 == 0 {
			v = DropLoss
		}
		r.add(base+time.Duration(i)*ms, v)
	}
	r.add(base+50*ms, DropQueue)
	now := base + 99*ms
	c := r.sum(now, 50*ms)
	if c.WindowNs != 50*ms || c.Delivered+c.DropLoss != 50 || c.DropLoss != 10 || c.DropQueue != 1 {
		t.Fatalf("last 50ms: %+v", c)
	}
	if c := r.sum(now, time.Second); c.Delivered != 80 || c.DropLoss != 20 {
		t.Fatalf("last second: %+v", c)
	}
	// Long after: nothing (old buckets are not counted again).
	if c := r.sum(now+5*time.Second, 100*ms); c.Delivered+c.DropLoss+c.DropQueue != 0 {
		t.Fatalf("5s later: %+v", c)
	}
	// A ring that wrapped around keeps only what is recent.
	r.add(now+RecentSpan, Deliver)
	if c := r.sum(now+RecentSpan, RecentSpan); c.Delivered != 1 || c.DropLoss != 0 {
		t.Fatalf("after wrapping: %+v", c)
	}
}
