package report

import (
	"sort"
	"strings"
)

// The names of a summary's figures, as results files, papers.yaml and
// scenarios' primary metric name them: goodput_mbit, duration_s, bytes,
// retransmits, bytes_retrans, fct_median_ms and fct_p99_ms (short flows),
// share:PATH (the share of the bytes PATH carried), competitor_goodput_mbit
// (with competitors), and every key of Metrics.

// Value is one of a summary's figures by its name.
func Value(s *Summary, metric string) (float64, bool) {
	switch metric {
	case "goodput_mbit":
		return s.GoodputMbit, true
	case "retransmits":
		return float64(s.Retransmits), true
	case "bytes_retrans":
		return float64(s.BytesRetrans), true
	case "bytes":
		return float64(s.Bytes), true
	case "duration_s":
		return s.DurationS, true
	case "fct_median_ms", "fct_p99_ms":
		if s.FCT == nil || s.FCT.Count == 0 {
			return 0, false
		}
		if metric == "fct_median_ms" {
			return s.FCT.Median, true
		}
		return s.FCT.P99, true
	}
	if path, ok := strings.CutPrefix(metric, "share:"); ok {
		ps, ok := s.Paths[path]
		return ps.Share, ok
	}
	if metric == "competitor_goodput_mbit" {
		if s.CompetitorGoodputMbit == nil {
			return 0, false
		}
		return *s.CompetitorGoodputMbit, true
	}
	v, ok := s.Metrics[metric]
	return v, ok
}

// Values are all of a summary's figures by name (Value's names).
func Values(s *Summary) map[string]float64 {
	out := map[string]float64{
		"goodput_mbit":  s.GoodputMbit,
		"retransmits":   float64(s.Retransmits),
		"bytes_retrans": float64(s.BytesRetrans),
		"bytes":         float64(s.Bytes),
		"duration_s":    s.DurationS,
	}
	if s.FCT != nil && s.FCT.Count > 0 {
		out["fct_median_ms"], out["fct_p99_ms"] = s.FCT.Median, s.FCT.P99
	}
	for p, ps := range s.Paths {
		if p != "?" {
			out["share:"+p] = ps.Share
		}
	}
	if s.CompetitorGoodputMbit != nil {
		out["competitor_goodput_mbit"] = *s.CompetitorGoodputMbit
	}
	for k, v := range s.Metrics {
		out[k] = v
	}
	return out
}

// ValueNames lists the names Values gives for any of the summaries,
// sorted.
func ValueNames(sums ...*Summary) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range sums {
		for k := range Values(s) {
			if !seen[k] {
				seen[k] = true
				out = append(out, k)
			}
		}
	}
	sort.Strings(out)
	return out
}
