package docs

import (
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"

	"mpsteer/internal/docs/format"
	"mpsteer/internal/lab/results"
	"mpsteer/internal/stats"
)

// A figure's spec names its data and what to render from it:
//
//	SCENARIO value VARIANT [metric=M] [digits=N]     median with its 95% interval and n
//	SCENARIO values VARIANT [metric=M] [digits=N]    each run's value, in round order
//	SCENARIO ratio A/B [metric=M] [as=change|ratio]  median of the paired ratios A_r / B_r
//	SCENARIO best A [metric=M] [as=ratio|change] [alts=B,C]
//	                                                 A_r / the best alternative's B_r (default:
//	                                                 mptcp, tcp-best and tcp, where present)
//	SCENARIO verdict A/B >= 0.95 [metric=M]          met, not met or inside the noise (stats.Verdict)
//	SCENARIO verdict A <= 90 [metric=M]              the same on a variant's own value
//	SCENARIO verdict A/best >= 0.98 [alts=B,C]       the same on A against the best of B, C run by run
//	SCENARIO runs VARIANT                            how many runs count, and how many failed
//	SCENARIO provenance                              the commit, kernel and date of the data
//	bench/F.json[+bench/G.json…] PATH [unit=U] [scale=X] [digits=N] [of=PATH:LABEL] [bare|text]
//	                                                 a benchmark's value at PATH (a.b[2].c,
//	                                                 [*] for every element, [key=value] for
//	                                                 the element whose key is value): one
//	                                                 value as it is, several with their
//	                                                 median, interval and n; text: a word
//	                                                 (a congestion control's name), said
//	                                                 once when every file gives it;
//	                                                 bench/F/*.json: every file there (a
//	                                                 benchmark's runs, one file each)
//	… verdict=>=0.99 (or <=1.5)                     the verdict of those values against a target
//
// SCENARIO is docs/data/SCENARIO/results.json; M defaults to goodput_mbit
// (results.Run.Value names the others). A value with double quotes may hold
// spaces. bare (in tables only) leaves out the n, which the table's
// caption then gives; over several files it takes a value they all share.

type fig struct {
	raw    string
	source string   // a scenario name, or the data files
	files  []string // bench files, relative to the data directory
	kind   string
	args   []string
	opts   map[string]string
	bare   bool
	text   bool
}

var kindOpts = map[string][]string{
	"value":      {"metric", "digits", "absent"},
	"values":     {"metric", "digits", "absent"},
	"ratio":      {"metric", "as"},
	"best":       {"metric", "as", "alts"},
	"verdict":    {"metric", "alts", "absent"},
	"runs":       {},
	"provenance": {},
	"bench":      {"unit", "scale", "digits", "of", "verdict", "each"},
}

// optName is an option's name; a token like a.b[key=value] is a path.
var optName = regexp.MustCompile(`^[a-z]+$`)

var kindArgs = map[string]int{"value": 1, "values": 1, "ratio": 1, "best": 1, "verdict": 3, "runs": 1, "provenance": 0, "bench": 1}

// fields splits a spec at white space, keeping "quoted values" whole.
func fields(s string) ([]string, error) {
	var out []string
	var cur strings.Builder
	in, have := false, false
	for _, r := range s {
		switch {
		case r == '"':
			in, have = !in, true
		case !in && (r == ' ' || r == '\t'):
			if have {
				out = append(out, cur.String())
				cur.Reset()
				have = false
			}
		default:
			cur.WriteRune(r)
			have = true
		}
	}
	if in {
		return nil, fmt.Errorf("a quote that does not close")
	}
	if have {
		out = append(out, cur.String())
	}
	return out, nil
}

func parseFig(spec string) (*fig, error) {
	toks, err := fields(spec)
	if err != nil {
		return nil, err
	}
	if len(toks) == 0 {
		return nil, fmt.Errorf("empty")
	}
	f := &fig{raw: spec, source: toks[0], opts: map[string]string{}}
	rest := toks[1:]
	if strings.HasSuffix(f.source, ".json") {
		f.kind = "bench"
		for _, p := range strings.Split(f.source, "+") {
			if !strings.HasSuffix(p, ".json") || filepath.IsAbs(p) || strings.Contains(p, "..") {
				return nil, fmt.Errorf("%q: a data file is a .json path inside the data directory (bench/NAME.json)", p)
			}
			f.files = append(f.files, p)
		}
	} else {
		if len(rest) == 0 {
			return nil, fmt.Errorf("say what to render from %s: value, values, ratio, best, verdict, runs or provenance", f.source)
		}
		f.kind, rest = rest[0], rest[1:]
		if _, ok := kindOpts[f.kind]; !ok || f.kind == "bench" {
			return nil, fmt.Errorf("%q is not a kind of figure (valid: value, values, ratio, best, verdict, runs, provenance)", f.kind)
		}
	}
	for _, t := range rest {
		k, v, isOpt := strings.Cut(t, "=")
		switch {
		case t == "bare":
			f.bare = true
		case t == "text":
			f.text = true
		case isOpt && optName.MatchString(k):
			valid := kindOpts[f.kind]
			if !slices.Contains(valid, k) {
				return nil, fmt.Errorf("option %q is not one of %s's (valid: %s)", k, f.kind, strings.Join(append(valid, "bare"), ", "))
			}
			f.opts[k] = v
		default:
			f.args = append(f.args, t)
		}
	}
	if want := kindArgs[f.kind]; len(f.args) != want {
		return nil, fmt.Errorf("%s takes %d argument(s) before its options, not %d (%s)", f.kind, want, len(f.args), strings.Join(f.args, " "))
	}
	if f.text && f.kind != "bench" {
		return nil, fmt.Errorf("text is for a benchmark's words (a name), not a run's figure")
	}
	if v, ok := f.opts["verdict"]; ok {
		op, num := v[:min(2, len(v))], v[min(2, len(v)):]
		if _, err := strconv.ParseFloat(num, 64); (op != ">=" && op != "<=") || err != nil {
			return nil, fmt.Errorf("verdict=%s: give >=TARGET or <=TARGET", v)
		}
	}
	if f.bare && f.kind != "bench" {
		return nil, fmt.Errorf("bare is for a benchmark's values in a table whose caption gives their n; a run's figure always shows its n")
	}
	if f.bare && f.text {
		return nil, fmt.Errorf("bare or text, not both")
	}
	if a, ok := f.opts["absent"]; ok && a != "none" {
		return nil, fmt.Errorf("absent=%s: valid is none (a run may lack the metric: what it measures did not happen in that run)", a)
	}
	if as, ok := f.opts["as"]; ok && as != "change" && as != "ratio" {
		return nil, fmt.Errorf("as=%s: valid are change and ratio", as)
	}
	if d, ok := f.opts["digits"]; ok {
		if n, err := strconv.Atoi(d); err != nil || n < 0 || n > 6 {
			return nil, fmt.Errorf("digits=%s: a count of decimals, 0 to 6", d)
		}
	}
	if f.kind == "verdict" {
		if op := f.args[1]; op != ">=" && op != "<=" {
			return nil, fmt.Errorf("verdict: %q is not >= or <=", op)
		}
		if _, err := strconv.ParseFloat(f.args[2], 64); err != nil {
			return nil, fmt.Errorf("verdict: the target %q is not a number", f.args[2])
		}
	}
	return f, nil
}

// usage records what a figure drew on: its data files and the variants.
type usage struct {
	rels     []string
	variants []string
}

// render renders a figure from the data.
func (d *data) render(f *fig) (string, usage, error) {
	if f.kind == "bench" {
		return d.renderBench(f)
	}
	rel := resultsPath(f.source)
	u := usage{rels: []string{rel}}
	r, err := d.Results(rel)
	if err != nil {
		return "", u, err
	}
	if msg := r.Provenance.Check(); msg != "" {
		return "", u, fmt.Errorf("%s: %s: a figure needs data that say where they come from", filepath.Join(d.dir, rel), msg)
	}
	metric := f.opts["metric"]
	if metric == "" {
		metric = "goodput_mbit"
	}
	variant := func(v string) error {
		u.variants = append(u.variants, v)
		if r.Variants[v] == nil {
			if s := d.Scenario(f.source); s == nil || s.Variant(v) == nil {
				var have []string
				if s != nil {
					for _, sv := range s.Variants {
						have = append(have, sv.Name)
					}
				} else {
					have = r.VariantNames()
				}
				return fmt.Errorf("%s has no variant %q (it has %s)", f.source, v, strings.Join(have, ", "))
			}
			return nil // the scenario has it; these data have no run of it
		}
		if f.kind == "runs" || len(r.Values(v, "goodput_mbit")) == 0 {
			return nil
		}
		if len(r.Values(v, metric)) == 0 && f.opts["absent"] != "none" {
			return fmt.Errorf("no run of %s in %s has %s (absent=none if that is a finding: what it measures never happened)", v, filepath.Join(d.dir, rel), metric)
		}
		return nil
	}
	// none: with absent=none, a variant whose runs all lack the metric
	// (default MPTCP that never came back to a path after its outage).
	none := func(v string) (string, bool) {
		n := len(r.Values(v, "goodput_mbit"))
		if f.opts["absent"] != "none" || n == 0 || len(r.Values(v, metric)) > 0 {
			return "", false
		}
		return fmt.Sprintf("none in %d runs", n), true
	}
	unit := format.UnitOf(metric)
	if ds, ok := f.opts["digits"]; ok {
		unit.Digits, _ = strconv.Atoi(ds)
	}
	noRuns := func(v string) string {
		if n := r.Failed(v); n > 0 {
			return fmt.Sprintf("no runs (%d failed)", n)
		}
		return "no runs"
	}
	pair := func(s string) (string, string, error) {
		a, b, ok := strings.Cut(s, "/")
		if !ok || a == "" || b == "" {
			return "", "", fmt.Errorf("%q: give A/B, two variants", s)
		}
		if err := variant(a); err != nil {
			return "", "", err
		}
		return a, b, variant(b)
	}
	as := func(def string) string {
		if a := f.opts["as"]; a != "" {
			return a
		}
		return def
	}
	// againstBest is a against the best of its alternatives (alts=, or
	// every baseline the data have), run by run.
	againstBest := func(a string) (stats.Estimate, error) {
		if err := variant(a); err != nil {
			return stats.Estimate{}, err
		}
		alts := baselinesOf(r, a)
		if list := f.opts["alts"]; list != "" {
			alts = strings.Split(list, ",")
		}
		if len(alts) == 0 {
			return stats.Estimate{}, fmt.Errorf("%s: no alternative to compare %s with (give alts=)", f.source, a)
		}
		for _, alt := range alts {
			if err := variant(alt); err != nil {
				return stats.Estimate{}, err
			}
		}
		return r.AgainstBest(a, alts, metric).Ratio, nil
	}
	switch f.kind {
	case "provenance":
		return r.Provenance.Summary(), u, nil
	case "runs":
		v := f.args[0]
		if err := variant(v); err != nil {
			return "", u, err
		}
		n, failed := len(r.Values(v, "goodput_mbit")), r.Failed(v)
		s := fmt.Sprintf("%d run", n)
		if n != 1 {
			s += "s"
		}
		if failed > 0 {
			s += fmt.Sprintf(" (%d failed, left out)", failed)
		}
		return s, u, nil
	case "value":
		v := f.args[0]
		if err := variant(v); err != nil {
			return "", u, err
		}
		if txt, ok := none(v); ok {
			return txt, u, nil
		}
		s := r.Estimate(v, metric)
		if s.N == 0 {
			return noRuns(v), u, nil
		}
		return format.Estimate(s, unit), u, nil
	case "values":
		v := f.args[0]
		if err := variant(v); err != nil {
			return "", u, err
		}
		if txt, ok := none(v); ok {
			return txt, u, nil
		}
		xs := r.Values(v, metric)
		if len(xs) == 0 {
			return noRuns(v), u, nil
		}
		parts := make([]string, len(xs))
		for i, x := range xs {
			parts[i] = format.Num(x*unit.Scale, unit.Digits)
		}
		return strings.Join(parts, ", ") + unit.Suffix() + fmt.Sprintf(" (n = %d)", len(xs)), u, nil
	case "ratio":
		a, b, err := pair(f.args[0])
		if err != nil {
			return "", u, err
		}
		return format.Ratio(r.Paired(a, b, metric).Ratio, as("change")), u, nil
	case "best":
		s, err := againstBest(f.args[0])
		if err != nil {
			return "", u, err
		}
		return format.Ratio(s, as("ratio")), u, nil
	case "verdict":
		target, _ := strconv.ParseFloat(f.args[2], 64)
		higher := f.args[1] == ">="
		var s stats.Estimate
		if a, ok := strings.CutSuffix(f.args[0], "/best"); ok {
			// A/best: against the best of the alternatives, run by run.
			var err error
			if s, err = againstBest(a); err != nil {
				return "", u, err
			}
		} else if strings.Contains(f.args[0], "/") {
			a, b, err := pair(f.args[0])
			if err != nil {
				return "", u, err
			}
			s = r.Paired(a, b, metric).Ratio
		} else {
			if err := variant(f.args[0]); err != nil {
				return "", u, err
			}
			if txt, ok := none(f.args[0]); ok {
				return "not met (" + txt + ")", u, nil
			}
			s = r.Estimate(f.args[0], metric)
		}
		return format.Verdict(s, string(stats.Decide(s, target, higher))), u, nil
	}
	return "", u, fmt.Errorf("unknown kind %s", f.kind)
}

// baselinesOf lists the baselines present in r other than a.
func baselinesOf(r *results.File, a string) []string {
	return slices.DeleteFunc(results.Alternatives(r.VariantNames(), nil), func(b string) bool { return b == a })
}

// benchFiles expands a figure's data files: a name with * in it stands for
// every file it matches, in name order (a benchmark's repeated runs, one
// file each), and must match one at least.
func (d *data) benchFiles(files []string) ([]string, error) {
	var out []string
	for _, rel := range files {
		if !strings.Contains(rel, "*") {
			out = append(out, rel)
			continue
		}
		base := filepath.Join(d.root, d.dir)
		ms, err := filepath.Glob(filepath.Join(base, rel))
		if err != nil {
			return nil, fmt.Errorf("%s: %v", filepath.Join(d.dir, rel), err)
		}
		if len(ms) == 0 {
			return nil, errMissing{filepath.Join(d.dir, rel)}
		}
		for _, m := range ms {
			r, err := filepath.Rel(base, m)
			if err != nil {
				return nil, err
			}
			out = append(out, filepath.ToSlash(r))
		}
	}
	return out, nil
}

func (d *data) renderBench(f *fig) (string, usage, error) {
	files, err := d.benchFiles(f.files)
	if err != nil {
		return "", usage{rels: f.files}, err
	}
	u := usage{rels: files}
	var vals []float64
	var words, of []string
	for _, rel := range files {
		bf, err := d.Bench(rel)
		if err != nil {
			return "", u, err
		}
		if msg := bf.prov.Check(); msg != "" {
			return "", u, fmt.Errorf("%s: %s: a figure needs data that say where they come from", filepath.Join(d.dir, rel), msg)
		}
		xs, err := evalPath(bf.v, f.args[0])
		if err != nil {
			return "", u, fmt.Errorf("%s: %v", filepath.Join(d.dir, rel), err)
		}
		for _, x := range xs {
			if f.text {
				if w := fmt.Sprint(x); !slices.Contains(words, w) {
					words = append(words, w) // the same word in every run is said once
				}
				continue
			}
			v, ok := x.(float64)
			if !ok {
				return "", u, fmt.Errorf("%s: %s is %v, not a number", filepath.Join(d.dir, rel), f.args[0], x)
			}
			vals = append(vals, v)
		}
		if spec := f.opts["of"]; spec != "" {
			p, label, ok := strings.Cut(spec, ":")
			if !ok || label == "" {
				return "", u, fmt.Errorf("of=%s: give PATH:LABEL (e.g. of=results.samples:samples)", spec)
			}
			ns, err := evalPath(bf.v, p)
			if err != nil || len(ns) != 1 {
				return "", u, fmt.Errorf("%s: of=%s: %v", filepath.Join(d.dir, rel), spec, err)
			}
			of = append(of, fmt.Sprintf("%v %s", ns[0], label))
		}
	}
	if f.text {
		if len(words) == 0 {
			return "", u, fmt.Errorf("%s matches nothing", f.args[0])
		}
		return strings.Join(words, ", "), u, nil
	}
	last := f.args[0]
	if i := strings.LastIndexAny(last, ".]"); i >= 0 {
		last = last[i+1:]
	}
	unit := format.UnitOf(last)
	if name, ok := f.opts["unit"]; ok {
		unit = format.Unit{Name: name, Scale: 1, Digits: 2}
	}
	if sc, ok := f.opts["scale"]; ok {
		x, err := strconv.ParseFloat(sc, 64)
		if err != nil {
			return "", u, fmt.Errorf("scale=%s is not a number", sc)
		}
		unit.Scale = x
	}
	if ds, ok := f.opts["digits"]; ok {
		unit.Digits, _ = strconv.Atoi(ds)
	}
	if len(vals) == 0 {
		return "", u, fmt.Errorf("%s matches nothing", f.args[0])
	}
	sum := stats.MedianCI(vals)
	if v, ok := f.opts["verdict"]; ok {
		target, _ := strconv.ParseFloat(v[2:], 64)
		return format.Verdict(sum, string(stats.Decide(sum, target, v[:2] == ">="))), u, nil
	}
	if f.bare {
		// A setting every run shares (a count of subflows, of samples) is
		// one value; a measurement that differs run to run needs its n.
		if slices.ContainsFunc(vals, func(v float64) bool { return v != vals[0] }) {
			return "", u, fmt.Errorf("bare shows one value; %s gives %d different ones", f.args[0], len(vals))
		}
		return format.Value(vals[0], unit), u, nil
	}
	// each=NOUN: what one value is (default: a run), for the count.
	each := "run"
	if e := f.opts["each"]; e != "" {
		each = e
	}
	if len(vals) == 1 {
		note := "1 " + each
		if len(of) > 0 {
			note += ", " + strings.Join(of, ", ")
		}
		return format.Value(vals[0], unit) + " (" + note + ")", u, nil
	}
	return strings.Replace(format.Estimate(sum, unit), ")", " "+each+"s)", 1), u, nil
}

// evalPath walks a decoded JSON value: keys joined by ".", [i] for an
// element, [*] for every element, [key=value] for the element of a list
// of objects whose key is value, [k=v&k2=v2] for the one whose keys are
// all those values.
func evalPath(v any, path string) ([]any, error) {
	cur := []any{v}
	p := path
	for p != "" {
		var step string
		switch {
		case p[0] == '.':
			p = p[1:]
			continue
		case p[0] == '[':
			end := strings.IndexByte(p, ']')
			if end < 0 {
				return nil, fmt.Errorf("%s: a [ that does not close", path)
			}
			step, p = p[:end+1], p[end+1:]
		default:
			end := strings.IndexAny(p, ".[")
			if end < 0 {
				end = len(p)
			}
			step, p = p[:end], p[end:]
		}
		var next []any
		for _, c := range cur {
			xs, err := stepInto(c, step)
			if err != nil {
				return nil, fmt.Errorf("%s: at %s: %v", path, step, err)
			}
			next = append(next, xs...)
		}
		cur = next
	}
	return cur, nil
}

func stepInto(v any, step string) ([]any, error) {
	if !strings.HasPrefix(step, "[") {
		m, ok := v.(map[string]any)
		if !ok {
			return nil, fmt.Errorf("not an object")
		}
		x, ok := m[step]
		if !ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return nil, fmt.Errorf("no key %q (there are %s)", step, strings.Join(keys, ", "))
		}
		return []any{x}, nil
	}
	list, ok := v.([]any)
	if !ok {
		return nil, fmt.Errorf("not a list")
	}
	inner := step[1 : len(step)-1]
	if inner == "*" {
		return list, nil
	}
	if strings.Contains(inner, "=") {
		return selectOne(list, inner)
	}
	i, err := strconv.Atoi(inner)
	if err != nil || i < 0 || i >= len(list) {
		return nil, fmt.Errorf("no element %s of %d", inner, len(list))
	}
	return []any{list[i]}, nil
}

// selectOne picks the one element of a list of objects that has every
// key=value of cond (pairs joined by "&").
func selectOne(list []any, cond string) ([]any, error) {
	type pair struct{ k, v string }
	var want []pair
	for _, c := range strings.Split(cond, "&") {
		k, v, ok := strings.Cut(c, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("%q: a condition is key=value (several joined by &)", c)
		}
		want = append(want, pair{k, v})
	}
	var out []any
	for _, e := range list {
		m, ok := e.(map[string]any)
		if ok && !slices.ContainsFunc(want, func(p pair) bool { return fmt.Sprint(m[p.k]) != p.v }) {
			out = append(out, e)
		}
	}
	if len(out) != 1 {
		desc := make([]string, len(want))
		for i, p := range want {
			desc[i] = fmt.Sprintf("%s = %q", p.k, p.v)
		}
		return nil, fmt.Errorf("%d elements have %s (one must)", len(out), strings.Join(desc, " and "))
	}
	return out, nil
}
