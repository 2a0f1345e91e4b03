package legacy

import (
	"encoding/json"
	"fmt"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/provenance"
)

// Note marks the provenance of data recorded before provenance was kept.
const Note = "recorded before provenance was kept"

// Convert makes every converted file of the manifest: data is the data
// directory (docs/data), scenarios the directory of the scenario files.
// The result maps each output (relative to data) to its contents.
func (mf *Manifest) Convert(data, scenarios string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var errs []string
	for _, ls := range mf.Scenarios {
		f, err := ls.convert(mf.File, data, scenarios)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		b, err := encodeResults(f)
		if err != nil {
			return nil, err
		}
		out[filepath.Join(ls.Name, "results.json")] = b
	}
	for _, lb := range mf.Bench {
		b, err := lb.convert(mf.File, data)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		out[filepath.Join("bench", lb.Name+".json")] = b
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	return out, nil
}

func legacyCommand(files []string) string {
	return "mpsteer docs legacy (converted from " + strings.Join(files, ", ") + ")"
}

func (lb Bench) convert(manifest, data string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(data, lb.File))
	if err != nil {
		return nil, fmt.Errorf("%s:%d: bench %s: %w", manifest, lb.Line, lb.Name, err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s:%d: bench %s: %s: %w", manifest, lb.Line, lb.Name, lb.File, err)
	}
	src := filepath.Join("docs/data", lb.File)
	p := provenance.Provenance{Commit: lb.Commit, Command: lb.Command + "; " + legacyCommand([]string{src}), Kernel: "unknown", Date: lb.Recorded,
		Legacy: Note, Sources: []string{src}}
	c, err := compact(map[string]any{"provenance": p, "results": v})
	if err != nil {
		return nil, err
	}
	return indented(c)
}

// rawRound is one `lab run`'s summaries, as decoded.
type rawRound []map[string]any

// roundsOf walks a legacy file: a list of summaries is one run of every
// variant listed (a round); a list of such lists is several rounds.
func roundsOf(v any, where string) ([]rawRound, error) {
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: a list of run summaries, or a list of such lists, was expected", where)
	}
	var sums rawRound
	var out []rawRound
	for i, e := range list {
		switch x := e.(type) {
		case map[string]any:
			if _, ok := x["variant"]; !ok {
				return nil, fmt.Errorf("%s[%d]: not a run summary (no variant)", where, i)
			}
			sums = append(sums, x)
		case []any:
			rs, err := roundsOf(x, fmt.Sprintf("%s[%d]", where, i))
			if err != nil {
				return nil, err
			}
			out = append(out, rs...)
		default:
			return nil, fmt.Errorf("%s[%d]: neither a run summary nor a list of them", where, i)
		}
	}
	if len(sums) > 0 && len(out) > 0 {
		return nil, fmt.Errorf("%s: mixes run summaries and lists of them", where)
	}
	if len(sums) > 0 {
		return []rawRound{sums}, nil
	}
	return out, nil
}

// readPart reads a legacy file, or the part of a mapping-shaped one named
// by key.
func readPart(data, file, key string) (any, string, error) {
	raw, err := os.ReadFile(filepath.Join(data, file))
	if err != nil {
		return nil, "", err
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, "", fmt.Errorf("%s: %w", file, err)
	}
	where := file
	if m, ok := v.(map[string]any); ok {
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		if key == "" {
			return nil, "", fmt.Errorf("%s is a mapping: say which part with key (one of %q)", file, keys)
		}
		part, ok := m[key]
		if !ok {
			return nil, "", fmt.Errorf("%s has no key %q (it has %q)", file, key, keys)
		}
		return part, where + ": " + key, nil
	}
	if key != "" {
		return nil, "", fmt.Errorf("%s is not a mapping, key %q names nothing", file, key)
	}
	return v, where, nil
}

// failedReason says why a legacy run counts as failed ("" when it does
// not): its traffic did not finish, by its own errors, or by a duration
// well short of the scenario's bulk transfer for one that did not reach its
// size (short flows end when they end: only their errors tell).
func failedReason(s map[string]any, sc *scenario.Scenario) string {
	if errs, ok := s["errors"].([]any); ok {
		for _, e := range errs {
			if msg, ok := e.(string); ok && strings.Contains(msg, "did not finish") {
				return msg
			}
		}
	}
	dur, ok := s["duration_s"].(float64)
	if !ok {
		return "no duration_s: not a complete run summary"
	}
	var want, size float64
	for _, t := range sc.Traffic {
		if t.Kind == scenario.Bulk && t.Duration > 0 {
			want = max(want, (t.Start + t.Duration).Seconds())
			size = max(size, float64(t.Size))
		}
	}
	if want > 0 && dur < 0.9*want {
		if b, _ := s["bytes"].(float64); size == 0 || b < size {
			return fmt.Sprintf("traffic did not finish (%.1f of %.0f s)", dur, want)
		}
	}
	return ""
}

func (ls Scenario) convert(manifest, data, scenarios string) (*results.File, error) {
	fail := func(line int, format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s: %s", manifest, line, ls.Name, fmt.Sprintf(format, args...))
	}
	scFile := filepath.Join(scenarios, ls.Name+".yaml")
	sc, err := scenario.Load(scFile)
	if err != nil {
		return nil, fail(ls.Line, "%v", err)
	}
	// The scenario file gives the traffic's length (to tell a run that did
	// not finish), not its description: the file may have changed since
	// the runs, and a legacy summary does not say what it was then. Nor
	// its primary metric: the converted files compare on goodput.
	in := results.Input{Scenario: ls.Name, File: filepath.ToSlash(filepath.Join("scenarios", ls.Name+".yaml")), Complete: true,
		Compare: ls.Compare, Kinds: map[string]string{}, Runs: map[string][]results.Run{}}
	var files, commits, days []string
	add := func(list []string, v string) []string {
		if slices.Contains(list, v) {
			return list
		}
		return append(list, v)
	}
	round := 0
	for _, src := range ls.Sources {
		part, where, err := readPart(data, src.File, src.Key)
		if err != nil {
			return nil, fail(src.Line, "%v", err)
		}
		rounds, err := roundsOf(part, where)
		if err != nil {
			return nil, fail(src.Line, "%v", err)
		}
		var extra map[string]map[string]any
		if src.Metrics != nil {
			if extra, err = metricsByVariant(data, src.Metrics); err != nil {
				return nil, fail(src.Line, "metrics_from: %v", err)
			}
		}
		as := src.As
		if as == "" {
			as = ls.Name
		}
		used := 0
		for _, rr := range rounds {
			type variantRun struct {
				variant string
				run     results.Run
			}
			var runs []variantRun
			for _, s := range rr {
				if name, _ := s["scenario"].(string); name != as {
					continue
				}
				variant, _ := s["variant"].(string)
				if len(src.Variants) > 0 && !slices.Contains(src.Variants, variant) {
					continue
				}
				fields := maps.Clone(s)
				if e := extra[variant]; e != nil {
					if err := mergeMetrics(fields, e, src.Metrics); err != nil {
						return nil, fail(src.Line, "metrics_from %s, variant %s: %v", src.Metrics.File, variant, err)
					}
				}
				reason := failedReason(s, sc)
				runs = append(runs, variantRun{variant, results.Run{Attempt: 1, Failed: reason != "", Reason: reason, Fields: fields}})
			}
			if len(runs) == 0 {
				continue
			}
			round++
			used++
			seen := map[string]bool{}
			for _, vr := range runs {
				if seen[vr.variant] {
					return nil, fail(src.Line, "%s: variant %s twice in one run", where, vr.variant)
				}
				seen[vr.variant] = true
				vr.run.Round = round
				if in.Runs[vr.variant] == nil {
					in.Order = append(in.Order, vr.variant)
					in.Kinds[vr.variant], _ = vr.run.Fields["kind"].(string)
				}
				in.Runs[vr.variant] = append(in.Runs[vr.variant], vr.run)
			}
		}
		if used == 0 {
			return nil, fail(src.Line, "%s holds no runs of scenario %q%s", where, as, variantsNote(src.Variants))
		}
		for _, v := range src.Variants {
			if in.Runs[v] == nil {
				return nil, fail(src.Line, "%s holds no runs of variant %s", where, v)
			}
		}
		files = add(files, filepath.ToSlash(filepath.Join("docs/data", src.File)))
		commits = add(commits, src.Commit)
		days = add(days, src.Recorded)
	}
	sort.Strings(days)
	in.RunsRequested = round
	in.Provenance = provenance.Provenance{Commit: strings.Join(commits, ", "), Command: legacyCommand(files), Kernel: "unknown",
		Date: strings.Join(days, ", "), Legacy: Note, Sources: files}
	return results.Build(in), nil
}

func variantsNote(vs []string) string {
	if len(vs) == 0 {
		return ""
	}
	return " (variants " + strings.Join(vs, ", ") + ")"
}

func metricsByVariant(data string, mf *MetricsFrom) (map[string]map[string]any, error) {
	part, where, err := readPart(data, mf.File, mf.Key)
	if err != nil {
		return nil, err
	}
	list, ok := part.([]any)
	if !ok {
		return nil, fmt.Errorf("%s: a list of per-variant entries was expected", where)
	}
	out := map[string]map[string]any{}
	for i, e := range list {
		m, ok := e.(map[string]any)
		v, _ := m["variant"].(string)
		if !ok || v == "" {
			return nil, fmt.Errorf("%s[%d]: an entry with a variant was expected", where, i)
		}
		out[v] = m
	}
	return out, nil
}

// mergeMetrics adds a script's figures for a run to its metrics, once the
// entry's goodput shows that it is the same run.
func mergeMetrics(fields, extra map[string]any, mf *MetricsFrom) error {
	g1, ok1 := fields["goodput_mbit"].(float64)
	g2, ok2 := extra["goodput_mbit"].(float64)
	if !ok1 || !ok2 || math.Abs(g1-g2) > 1e-6*math.Max(1, g1) {
		return fmt.Errorf("goodput %v against the run's %v: not the same run", extra["goodput_mbit"], fields["goodput_mbit"])
	}
	metrics, _ := fields["metrics"].(map[string]any)
	merged := make(map[string]any, len(metrics)+len(mf.Fields))
	for k, v := range metrics {
		merged[k] = v
	}
	for _, f := range mf.Fields {
		v, present := extra[f]
		if !present {
			return fmt.Errorf("no field %s", f)
		}
		_, inMetrics := merged[f]
		if _, top := fields[f]; inMetrics || top {
			return fmt.Errorf("field %s is already a value of the run", f)
		}
		if x, ok := v.(float64); ok {
			merged[f] = x
		}
	}
	fields["metrics"] = merged
	return nil
}
