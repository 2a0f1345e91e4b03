package report

import (
	"encoding/json"
	"testing"
	"time"
)

func TestFCTStatsUsesTheSharedQuantileRule(t *testing.T) {
	// 1..100 ms, shuffled: by the nearest-rank rule p50 is the 50th
	// smallest, p90 the 90th and p99 the 99th.
	var fcts []time.Duration
	for i := 100; i >= 1; i-- {
		fcts = append(fcts, time.Duration(i)*time.Millisecond)
	}
	first := fcts[0]
	got := FCTStats(fcts)
	want := Percentiles{P50: 50, P90: 90, P99: 99, Mean: 50.5}
	if got != want {
		t.Fatalf("FCTStats = %+v, want %+v", got, want)
	}
	if fcts[0] != first {
		t.Errorf("FCTStats reordered its input")
	}
	// With ten flows, p99 is the slowest: at least 99% of the flows must
	// be at or below it.
	ten := []time.Duration{1, 2, 3, 4, 5, 6, 7, 8, 9, 10}
	for i := range ten {
		ten[i] *= time.Millisecond
	}
	if got := FCTStats(ten); got.P50 != 5 || got.P90 != 9 || got.P99 != 10 {
		t.Errorf("FCTStats(1..10 ms) = %+v, want p50 5, p90 9, p99 10", got)
	}
	if (FCTStats(nil) != Percentiles{}) {
		t.Errorf("FCTStats(nil) = %+v", FCTStats(nil))
	}
	b, _ := json.Marshal(got)
	if string(b) != `{"p50":50,"p90":90,"p99":99,"mean":50.5}` {
		t.Errorf("JSON = %s", b)
	}
}

// Summaries written before the preferred path's figure took the name
// link_up_to_first_data_ms held the per-path lists there: read as such.
func TestSummaryOfTheOlderShapeReads(t *testing.T) {
	var old Summary
	if err := json.Unmarshal([]byte(`{"variant": "v", "link_up_to_first_data_ms": {"wifi": [82.5, 90]}}`), &old); err != nil {
		t.Fatal(err)
	}
	if len(old.Recoveries["wifi"]) != 2 || old.LinkUpToFirstDataMs != nil || old.Variant != "v" {
		t.Fatalf("older summary read as %+v", old)
	}
	var cur Summary
	if err := json.Unmarshal([]byte(`{"link_up_to_first_data_ms": 64.5, "preferred_share_after_return": 0.93, "link_up_to_first_data_ms_by_path": {"wifi": [64.5]}}`), &cur); err != nil {
		t.Fatal(err)
	}
	if cur.LinkUpToFirstDataMs == nil || *cur.LinkUpToFirstDataMs != 64.5 || *cur.PreferredShareAfterReturn != 0.93 || len(cur.Recoveries["wifi"]) != 1 {
		t.Fatalf("summary read as %+v", cur)
	}
}
