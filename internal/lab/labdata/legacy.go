package labdata

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/stats"
	"mpsteer/internal/yamlcfg"
)

// The lab's data recorded before results.json schema 2 are lists of run
// summaries (one list per `lab run`, sometimes lists of such lists, or a
// mapping of names to them) without provenance. A manifest
// (docs/data/legacy.yaml) says, per scenario, which of those files (kept in
// docs/data/archive/, never edited) hold runs of it that still apply, and
// Convert turns them into a schema-2 results.json whose provenance is
// marked legacy. The manifest also names every archived file it does not
// use (superseded runs, plot data), with why, so that nothing leaves the
// count silently.

// Manifest is docs/data/legacy.yaml.
type Manifest struct {
	File      string
	Scenarios []LegacyScenario
	Bench     []LegacyBench
	Archived  []Archived
}

// LegacyScenario is one scenario's converted results.json and its sources.
type LegacyScenario struct {
	Name    string
	Compare []string // baselines to compare with beyond mptcp, tcp-best, tcp
	Sources []Source
	Line    int
}

// Source is one archived file's runs of a scenario.
type Source struct {
	File     string   // relative to the data directory
	Key      string   // the part of a mapping-shaped file
	Commit   string   // the build, from the file's name ("unknown" if none)
	Recorded string   // the day the file was committed
	As       string   // the scenario name the summaries carry, when not the scenario's
	Variants []string // only these variants' runs (all when empty)
	Why      string   // why only these variants (required with Variants)
	Metrics  *MetricsFrom
	Line     int
}

// MetricsFrom adds figures a script computed per variant of the same run
// (e.g. scripts/ramptcp-metrics.py) to the runs' metrics; the entries are
// matched to the runs by variant and must carry the same goodput.
type MetricsFrom struct {
	File   string
	Key    string
	Fields []string
}

// LegacyBench is a benchmark's JSON output recorded without provenance;
// Convert wraps it: {"provenance": …, "results": the file as it was}.
type LegacyBench struct {
	Name     string // docs/data/bench/<Name>.json
	File     string
	Commit   string
	Recorded string
	Command  string
	Line     int
}

// Archived is an archived file no converted file uses, and why.
type Archived struct {
	File string
	Why  string
	Line int
}

var (
	nameRe   = regexp.MustCompile(`^[a-z0-9][a-z0-9._+-]*$`)
	commitRe = regexp.MustCompile(`^([0-9a-f]{7,40}|unknown)$`)
	dayRe    = regexp.MustCompile(`^\d{4}-\d{2}-\d{2}$`)
)

// LoadManifest reads a manifest; every problem names the file, line and key.
func LoadManifest(file string) (*Manifest, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseManifest(file, data)
}

// ParseManifest reads a manifest's contents.
func ParseManifest(file string, data []byte) (*Manifest, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	mf := &Manifest{File: file}
	fileKey := func(mm *yamlcfg.Map, key string) string {
		f := mm.String(key, "")
		if f == "" && !mm.Failed(key) {
			mm.Errorf(key, "missing: a file under the data directory, e.g. archive/ecf-50-50-1m-4593a5c.json")
		} else if filepath.IsAbs(f) || strings.Contains(f, "..") {
			mm.Errorf(key, "%q: give a path inside the data directory (e.g. archive/x.json)", f)
		}
		return f
	}
	commitKey := func(mm *yamlcfg.Map) string {
		c := mm.String("commit", "")
		if !commitRe.MatchString(c) {
			mm.Errorf("commit", "%q: the commit the file's name gives (7+ hex digits), or unknown", c)
		}
		return c
	}
	dayKey := func(mm *yamlcfg.Map) string {
		d := mm.String("recorded", "")
		if !dayRe.MatchString(d) {
			mm.Errorf("recorded", "%q: the day the file was committed, YYYY-MM-DD", d)
		}
		return d
	}
	if sm := m.Map("scenarios"); sm != nil {
		for _, name := range sm.Keys() {
			em := sm.Map(name)
			if em == nil {
				continue
			}
			ls := LegacyScenario{Name: name, Line: em.Line(), Compare: em.Strings("compare")}
			if !nameRe.MatchString(name) {
				sm.Errorf(name, "%q is not a scenario name (scenarios/NAME.yaml)", name)
			}
			for _, it := range em.List("sources") {
				if it.Map == nil {
					em.ErrorAt(it.Node, it.Path, "a source is a mapping: {file, commit, recorded, key, as, variants, why, metrics_from}")
					continue
				}
				sm := it.Map
				src := Source{File: fileKey(sm, "file"), Key: sm.String("key", ""), Commit: commitKey(sm), Recorded: dayKey(sm),
					As: sm.String("as", ""), Variants: sm.Strings("variants"), Why: sm.String("why", ""), Line: it.Node.Line}
				if len(src.Variants) > 0 && src.Why == "" {
					sm.Errorf("variants", "say why only these variants' runs count (why: …)")
				}
				if mfm := sm.Map("metrics_from"); mfm != nil {
					src.Metrics = &MetricsFrom{File: fileKey(mfm, "file"), Key: mfm.String("key", ""), Fields: mfm.Strings("fields")}
					if len(src.Metrics.Fields) == 0 && !mfm.Failed("fields") {
						mfm.Errorf("fields", "name the fields to add to the runs' metrics")
					}
					mfm.Done()
				}
				sm.Done()
				ls.Sources = append(ls.Sources, src)
			}
			if len(ls.Sources) == 0 && !em.Failed("sources") {
				em.Errorf("sources", "a converted scenario needs at least one source")
			}
			em.Done()
			mf.Scenarios = append(mf.Scenarios, ls)
		}
		sm.Done()
	}
	if bm := m.Map("bench"); bm != nil {
		for _, name := range bm.Keys() {
			em := bm.Map(name)
			if em == nil {
				continue
			}
			if !nameRe.MatchString(name) {
				bm.Errorf(name, "%q is not a file name (bench/NAME.json)", name)
			}
			b := LegacyBench{Name: name, File: fileKey(em, "file"), Commit: commitKey(em), Recorded: dayKey(em), Command: em.String("command", ""), Line: em.Line()}
			if b.Command == "" && !em.Failed("command") {
				em.Errorf("command", "missing: the command that wrote the file (e.g. mpsteer bench observe)")
			}
			em.Done()
			mf.Bench = append(mf.Bench, b)
		}
		bm.Done()
	}
	for _, it := range m.List("archived") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "an entry is a mapping: {file, why}")
			continue
		}
		s := Archived{File: fileKey(it.Map, "file"), Why: it.Map.String("why", ""), Line: it.Node.Line}
		if s.Why == "" && !it.Map.Failed("why") {
			it.Map.Errorf("why", "say why no converted file uses it")
		}
		it.Map.Done()
		mf.Archived = append(mf.Archived, s)
	}
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return mf, nil
}

// Outputs lists every file Convert writes, relative to the data directory.
func (mf *Manifest) Outputs() []string {
	var out []string
	for _, s := range mf.Scenarios {
		out = append(out, filepath.Join(s.Name, "results.json"))
	}
	for _, b := range mf.Bench {
		out = append(out, filepath.Join("bench", b.Name+".json"))
	}
	return out
}

// Accounted maps every archived file the manifest names to what it says of
// it ("source of X", or the reason it is superseded).
func (mf *Manifest) Accounted() map[string]string {
	out := map[string]string{}
	for _, s := range mf.Scenarios {
		for _, src := range s.Sources {
			out[src.File] = "a source of " + s.Name
			if src.Metrics != nil {
				out[src.Metrics.File] = "metrics of " + s.Name
			}
		}
	}
	for _, b := range mf.Bench {
		out[b.File] = "bench/" + b.Name + ".json"
	}
	for _, s := range mf.Archived {
		out[s.File] = "archived: " + s.Why
	}
	return out
}

// Convert makes every converted file of the manifest: data is the data
// directory (docs/data), scenarios the directory of the scenario files.
// The result maps each output (relative to data) to its contents.
func (mf *Manifest) Convert(data, scenarios string) (map[string][]byte, error) {
	out := map[string][]byte{}
	var errs []string
	for _, ls := range mf.Scenarios {
		r, err := ls.convert(mf.File, data, scenarios)
		if err != nil {
			errs = append(errs, err.Error())
			continue
		}
		b, err := Encode(r)
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

// Encode writes results as the runner does: indented JSON, keys sorted.
func Encode(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

func legacyCommand(files []string) string {
	return "mpsteer docs legacy (converted from " + strings.Join(files, ", ") + ")"
}

func (lb LegacyBench) convert(manifest, data string) ([]byte, error) {
	raw, err := os.ReadFile(filepath.Join(data, lb.File))
	if err != nil {
		return nil, fmt.Errorf("%s:%d: bench %s: %w", manifest, lb.Line, lb.Name, err)
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil, fmt.Errorf("%s:%d: bench %s: %s: %w", manifest, lb.Line, lb.Name, lb.File, err)
	}
	src := filepath.Join("docs/data", lb.File)
	p := &Provenance{Commit: lb.Commit, Command: lb.Command + "; " + legacyCommand([]string{src}), Kernel: "unknown", Date: lb.Recorded,
		Legacy: LegacyNote, Sources: []string{src}}
	return Encode(map[string]any{"provenance": p, "results": v})
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
	dur, ok := number(s["duration_s"])
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
		if b, _ := number(s["bytes"]); size == 0 || b < size {
			return fmt.Sprintf("traffic did not finish (%.1f of %.0f s)", dur, want)
		}
	}
	return ""
}

func (ls LegacyScenario) convert(manifest, data, scenarios string) (*Results, error) {
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
	// the runs, and a legacy summary does not say what it was then.
	r := &Results{Schema: Schema, Scenario: ls.Name, File: filepath.ToSlash(filepath.Join("scenarios", ls.Name+".yaml")),
		Variants: map[string]*Variant{}, Comparisons: map[string]*Comparison{}, VsBest: map[string]*VsBest{}}
	var files, commits, days []string
	add := func(list []string, v string) []string {
		for _, x := range list {
			if x == v {
				return list
			}
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
		keep := map[string]bool{}
		for _, v := range src.Variants {
			keep[v] = true
		}
		used := 0
		for _, rr := range rounds {
			var runs []Run
			for _, s := range rr {
				if name, _ := s["scenario"].(string); name != as {
					continue
				}
				variant, _ := s["variant"].(string)
				if len(keep) > 0 && !keep[variant] {
					continue
				}
				fields := make(map[string]any, len(s))
				for k, v := range s {
					fields[k] = v
				}
				if e := extra[variant]; e != nil {
					if err := mergeMetrics(fields, e, src.Metrics); err != nil {
						return nil, fail(src.Line, "metrics_from %s, variant %s: %v", src.Metrics.File, variant, err)
					}
				}
				reason := failedReason(s, sc)
				runs = append(runs, Run{Attempt: 1, Failed: reason != "", Reason: reason, Variant: variant, Fields: fields})
			}
			if len(runs) == 0 {
				continue
			}
			round++
			used++
			seen := map[string]bool{}
			for _, run := range runs {
				if seen[run.Variant] {
					return nil, fail(src.Line, "%s: variant %s twice in one run", where, run.Variant)
				}
				seen[run.Variant] = true
				run.Round = round
				v := r.Variants[run.Variant]
				if v == nil {
					v = &Variant{}
					r.Variants[run.Variant] = v
					r.Order = append(r.Order, run.Variant)
				}
				v.Runs = append(v.Runs, run)
			}
		}
		if used == 0 {
			return nil, fail(src.Line, "%s holds no runs of scenario %q%s", where, as, variantsNote(src.Variants))
		}
		for v := range keep {
			if r.Variants[v] == nil {
				return nil, fail(src.Line, "%s holds no runs of variant %s", where, v)
			}
		}
		files = add(files, filepath.ToSlash(filepath.Join("docs/data", src.File)))
		commits = add(commits, src.Commit)
		days = add(days, src.Recorded)
	}
	sort.Strings(days)
	r.RunsRequested = round
	r.Provenance = &Provenance{Commit: strings.Join(commits, ", "), Command: legacyCommand(files), Kernel: "unknown",
		Date: strings.Join(days, ", "), Legacy: LegacyNote, Sources: files}
	r.Summarize(ls.Compare)
	return r, nil
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
	g1, ok1 := number(fields["goodput_mbit"])
	g2, ok2 := number(extra["goodput_mbit"])
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
		if x, ok := number(v); ok {
			merged[f] = x
		}
	}
	fields["metrics"] = merged
	return nil
}

// Baselines are the variants every other is compared with when present.
var Baselines = []string{"mptcp", "tcp-best", "tcp"}

// Summarize fills in what the runs sum up to, as the runner does: per
// variant the goodput and every other number of the runs' summaries; every
// variant against each baseline present (Baselines and the scenario's
// own); every variant that is not a baseline against the best of them.
func (r *Results) Summarize(compare []string) {
	if r.Comparisons == nil {
		r.Comparisons = map[string]*Comparison{}
	}
	if r.VsBest == nil {
		r.VsBest = map[string]*VsBest{}
	}
	for name, v := range r.Variants {
		v.FailedRuns = r.Failed(name)
		v.Goodput = r.Summary(name, "goodput_mbit")
		v.Metrics = map[string]stats.Estimate{}
		for _, k := range r.metricNames(name) {
			if s := r.Summary(name, k); s.N > 0 {
				v.Metrics[k] = s
			}
		}
	}
	var bases []string
	for _, b := range append(append([]string{}, Baselines...), compare...) {
		if r.Variants[b] != nil && !contains(bases, b) {
			bases = append(bases, b)
		}
	}
	for _, a := range r.VariantNames() {
		for _, b := range bases {
			if a == b {
				continue
			}
			s, pairs := r.Ratio(a, b, "goodput_mbit")
			if pairs == nil {
				pairs = [][2]float64{}
			}
			r.Comparisons[a+"/"+b] = &Comparison{Metric: "goodput_mbit", Ratio: s, Pairs: pairs}
		}
		if len(bases) > 0 && !contains(bases, a) {
			r.VsBest[a] = &VsBest{Alternatives: bases, Metric: "goodput_mbit", Ratio: r.RatioToBest(a, bases, "goodput_mbit")}
		}
	}
}

// metricNames lists the numbers of a variant's runs other than goodput:
// top-level numbers, the metrics, each path's share, the flows' FCT.
func (r *Results) metricNames(variant string) []string {
	set := map[string]bool{}
	for _, run := range r.Variants[variant].Runs {
		for k, v := range run.Fields {
			if _, ok := number(v); ok && k != "goodput_mbit" {
				set[k] = true
			}
		}
		if m, ok := run.Fields["metrics"].(map[string]any); ok {
			for k := range m {
				set[k] = true
			}
		}
		if p, ok := run.Fields["paths"].(map[string]any); ok {
			for k := range p {
				set["share:"+k] = true
			}
		}
		if _, ok := run.Fields["fct_ms"].(map[string]any); ok {
			set["fct_median_ms"], set["fct_p99_ms"] = true, true
		}
	}
	out := make([]string, 0, len(set))
	for k := range set {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
