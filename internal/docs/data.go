package docs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"mpsteer/internal/lab/results"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/provenance"
)

// data reads the files under the data directory once each, and records
// which ones the documents use.
type data struct {
	root      string // the repository
	dir       string // the data directory, relative to root (docs/data)
	scenarios string // the scenario files' directory, relative to root

	results map[string]*results.File // by path relative to dir
	bench   map[string]benchFile
	scen    map[string]*scenario.Scenario
	errs    map[string]error
	used    map[string]bool
}

type benchFile struct {
	v    any
	prov *provenance.Provenance
}

func newData(root, dir, scenarios string) *data {
	return &data{root: root, dir: dir, scenarios: scenarios, results: map[string]*results.File{}, bench: map[string]benchFile{},
		scen: map[string]*scenario.Scenario{}, errs: map[string]error{}, used: map[string]bool{}}
}

// errMissing says a figure's data file is not there.
type errMissing struct{ path string }

func (e errMissing) Error() string { return e.path + " is missing" }

// resultsPath is where a scenario's results are, relative to the data
// directory.
func resultsPath(scenario string) string { return filepath.Join(scenario, results.Name) }

// Results reads a results.json a figure uses.
func (d *data) Results(rel string) (*results.File, error) {
	d.used[rel] = true
	return d.loadResults(rel)
}

func (d *data) loadResults(rel string) (*results.File, error) {
	if r, ok := d.results[rel]; ok {
		return r, nil
	}
	if err, ok := d.errs[rel]; ok {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(d.root, d.dir, rel))
	var r *results.File
	if errors.Is(err, fs.ErrNotExist) {
		err = errMissing{filepath.Join(d.dir, rel)}
	} else if err == nil {
		if r, err = results.Parse(b); err != nil {
			err = fmt.Errorf("%s: %w", filepath.Join(d.dir, rel), err)
		}
	}
	if err != nil {
		d.errs[rel] = err
		return nil, err
	}
	d.results[rel] = r
	return r, nil
}

// Bench reads a benchmark's JSON (with its provenance) a figure uses.
func (d *data) Bench(rel string) (benchFile, error) {
	d.used[rel] = true
	return d.loadBench(rel)
}

func (d *data) loadBench(rel string) (benchFile, error) {
	if b, ok := d.bench[rel]; ok {
		return b, nil
	}
	if err, ok := d.errs[rel]; ok {
		return benchFile{}, err
	}
	b, err := os.ReadFile(filepath.Join(d.root, d.dir, rel))
	if errors.Is(err, fs.ErrNotExist) {
		err = errMissing{filepath.Join(d.dir, rel)}
	}
	var bf benchFile
	if err == nil {
		if err = json.Unmarshal(b, &bf.v); err != nil {
			err = fmt.Errorf("%s: %w", filepath.Join(d.dir, rel), err)
		}
	}
	if err == nil {
		bf.prov = provenanceOf(bf.v)
	}
	if err != nil {
		d.errs[rel] = err
		return benchFile{}, err
	}
	d.bench[rel] = bf
	return bf, nil
}

// provenanceOf reads the "provenance" object of a decoded data file (nil
// when it has none).
func provenanceOf(v any) *provenance.Provenance {
	m, ok := v.(map[string]any)
	if !ok {
		return nil
	}
	raw, ok := m["provenance"]
	if !ok {
		return nil
	}
	b, err := json.Marshal(raw)
	if err != nil {
		return nil
	}
	var p provenance.Provenance
	if json.Unmarshal(b, &p) != nil {
		return nil
	}
	return &p
}

// Scenario reads scenarios/<name>.yaml, to check that a figure's variant is
// one the scenario has (nil when there is no such file: the data name no
// shipped scenario).
func (d *data) Scenario(name string) *scenario.Scenario {
	if s, ok := d.scen[name]; ok {
		return s
	}
	s, err := scenario.Load(filepath.Join(d.root, d.scenarios, name+".yaml"))
	if err != nil {
		s = nil
	}
	d.scen[name] = s
	return s
}

// Provenance of a used data file, for the captions.
func (d *data) Provenance(rel string) *provenance.Provenance {
	if r, ok := d.results[rel]; ok {
		return &r.Provenance
	}
	if b, ok := d.bench[rel]; ok {
		return b.prov
	}
	return nil
}

// checkFiles reports every JSON data file (outside archive/ and soak/,
// which the reliability suite renders on its own) whose provenance is
// missing or incomplete, and every results.json whose stored figures are
// not what its runs give.
func (d *data) checkFiles() []string {
	var out []string
	base := filepath.Join(d.root, d.dir)
	var files []string
	filepath.WalkDir(base, func(p string, e fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(base, p)
		if e.IsDir() && (rel == "archive" || rel == "soak") {
			return filepath.SkipDir
		}
		if !e.IsDir() && strings.HasSuffix(p, ".json") {
			files = append(files, rel)
		}
		return nil
	})
	sort.Strings(files)
	for _, rel := range files {
		name := filepath.Join(d.dir, rel)
		if filepath.Base(rel) == results.Name {
			r, err := d.loadResults(rel)
			if err != nil {
				out = append(out, err.Error())
				continue
			}
			if msg := r.Provenance.Check(); msg != "" {
				out = append(out, fmt.Sprintf("%s: %s", name, msg))
			}
			for _, v := range r.Verify() {
				out = append(out, name+": "+v)
			}
			continue
		}
		bf, err := d.loadBench(rel)
		if err != nil {
			out = append(out, err.Error())
			continue
		}
		if msg := bf.prov.Check(); msg != "" {
			out = append(out, fmt.Sprintf("%s: %s", name, msg))
		}
	}
	return out
}
