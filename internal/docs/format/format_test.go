package format

import (
	"testing"

	"mpsteer/internal/stats"
)

func TestFormat(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{Estimate(stats.Estimate{Median: 51.94, Low: 50.8, High: 53.1, N: 5}, UnitOf("goodput_mbit")), "51.9 Mbit/s (95% CI 50.8–53.1, n = 5)"},
		{Estimate(stats.Estimate{Median: 51.94, Low: 51.94, High: 51.94, N: 1}, UnitOf("goodput_mbit")), "51.9 Mbit/s (n = 1)"},
		{Estimate(stats.Estimate{}, UnitOf("goodput_mbit")), "no runs"},
		{Estimate(stats.Estimate{Median: 0.93, Low: 0.9, High: 0.955, N: 3}, UnitOf("adhoc_share_from_200ms_after_up_mean")), "93.0% (95% CI 90.0–95.5%, n = 3)"},
		{Estimate(stats.Estimate{Median: 82.5, Low: 81, High: 83, N: 3}, UnitOf("adhoc_link_up_to_first_data_ms_median")), "82.5 ms (95% CI 81.0–83.0, n = 3)"},
		{Estimate(stats.Estimate{Median: 469, Low: 361, High: 469, N: 2}, UnitOf("retransmits")), "469 segments (95% CI 361–469, n = 2)"},
		{Ratio(stats.Estimate{Median: 1.012, Low: 0.995, High: 1.03, N: 5}, "change"), "+1.2% (95% CI −0.5 to +3.0%, n = 5)"},
		{Ratio(stats.Estimate{Median: 0.96, Low: 0.941, High: 0.982, N: 5}, "ratio"), "96.0% (95% CI 94.1–98.2%, n = 5)"},
		{Ratio(stats.Estimate{Median: 2.08, Low: 2.08, High: 2.08, N: 1}, "change"), "+108.0% (n = 1)"},
		{Ratio(stats.Estimate{}, "change"), "no paired runs"},
		{Verdict(stats.Estimate{N: 1}, string(stats.TooFewValues)), "too few runs (n = 1: no interval)"},
		{Num(-0.0001, 1), "0.0"},
		{Signed(-0.5, 1), "−0.5"},
	} {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
