// Package legacy converts the lab's data recorded before results.json
// schema 2 into that schema, as docs/data/legacy.yaml says, so that the
// documents quote them like any other measurement (and the docs check can
// tell that a converted file is still what its sources give).
package legacy

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"

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
	Scenarios []Scenario
	Bench     []Bench
	Archived  []Archived
}

// Scenario is one scenario's converted results.json and its sources.
type Scenario struct {
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

// Bench is a benchmark's JSON output recorded without provenance;
// Convert wraps it: {"provenance": …, "results": the file as it was}.
type Bench struct {
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
			ls := Scenario{Name: name, Line: em.Line(), Compare: em.Strings("compare")}
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
			b := Bench{Name: name, File: fileKey(em, "file"), Commit: commitKey(em), Recorded: dayKey(em), Command: em.String("command", ""), Line: em.Line()}
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
