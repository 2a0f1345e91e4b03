package results

import (
	"encoding/json"
	"math"
	"sort"
	"strings"
)

// The names of a run's figures, as results files, papers.yaml, the
// documents' figures and scenarios' primary metric name them:
//
//	goodput_mbit, duration_s, bytes, retransmits, bytes_retrans, …
//	                          a number at the top of the summary
//	fct_median_ms, fct_p99_ms the short flows' completion times
//	share:PATH                the share of the bytes PATH carried (0–1)
//	bytes:PATH                the bytes PATH carried
//	any other name            a key of the summary's metrics, each named
//	                          with its unit
//
// They are read from the summary as a file holds it, so that a summary of
// an older shape than report.Summary has the same names.

// Value is one of the run's figures by its name; ok is false when its
// summary has no such number (or it is null), or it has no summary.
func (r Run) Value(metric string) (float64, bool) {
	return value(r.fields(), metric)
}

// fields is the run's summary as a file holds it: Fields, or for a run
// the runner has just made its Summary as it will be written.
func (r Run) fields() map[string]any {
	if r.Fields != nil || r.Summary == nil {
		return r.Fields
	}
	b, err := json.Marshal(r.Summary)
	if err != nil {
		return nil
	}
	var m map[string]any
	if json.Unmarshal(b, &m) != nil {
		return nil
	}
	return m
}

func value(fields map[string]any, metric string) (float64, bool) {
	if path, ok := strings.CutPrefix(metric, "share:"); ok {
		return number(dig(fields, "paths", path, "share"))
	}
	if path, ok := strings.CutPrefix(metric, "bytes:"); ok {
		return number(dig(fields, "paths", path, "bytes"))
	}
	if hc, ok := strings.CutPrefix(metric, "counter:"); ok {
		// counter:HOST:NAME, an MPTCP MIB counter's move over the run on a
		// lab host (MPRstRx); a run keeps only the counters that moved.
		host, name, _ := strings.Cut(hc, ":")
		cs, ok := dig(fields, "mptcp_counters", host).(map[string]any)
		if !ok || name == "" {
			return 0, false
		}
		if v, ok := number(cs[name]); ok {
			return v, true
		}
		return 0, true
	}
	switch metric {
	case "fct_median_ms":
		return number(dig(fields, "fct_ms", "median"))
	case "fct_p99_ms":
		return number(dig(fields, "fct_ms", "p99"))
	}
	if v, ok := number(fields[metric]); ok {
		return v, true
	}
	return number(dig(fields, "metrics", metric))
}

// names lists the figures a summary has a number for, by name, sorted:
// every one a variant's estimates are made of (bytes:PATH is left out:
// a path's share says it per byte, and the bytes are at the top; so is
// the share of "?", the sockets on no known path).
func names(fields map[string]any) []string {
	var cand []string
	for k := range fields {
		cand = append(cand, k)
	}
	if m, ok := fields["metrics"].(map[string]any); ok {
		for k := range m {
			cand = append(cand, k)
		}
	}
	if p, ok := fields["paths"].(map[string]any); ok {
		for k := range p {
			if k != "?" {
				cand = append(cand, "share:"+k)
			}
		}
	}
	if _, ok := fields["fct_ms"].(map[string]any); ok {
		cand = append(cand, "fct_median_ms", "fct_p99_ms")
	}
	var out []string
	seen := map[string]bool{}
	for _, k := range cand {
		if seen[k] {
			continue
		}
		seen[k] = true
		if _, ok := value(fields, k); ok {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

func dig(m map[string]any, keys ...string) any {
	var cur any = m
	for _, k := range keys {
		mm, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = mm[k]
	}
	return cur
}

func number(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, !math.IsNaN(x)
	case int:
		return float64(x), true
	case int64:
		return float64(x), true
	case uint64:
		return float64(x), true
	}
	return 0, false
}
