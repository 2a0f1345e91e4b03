package main

import (
	"encoding/json"
	"testing"

	"mpsteer/internal/bench"
	"mpsteer/internal/lab/reproduce"
)

// Every benchmark docs/papers.yaml stands a paper's number beside is one
// of `mpsteer bench`, and each of its rows names a figure its JSON has.
func TestPapersBenchesExist(t *testing.T) {
	p, err := reproduce.Load("../../docs/papers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	// The JSON each benchmark writes, from its result type.
	results := map[string]any{"overhead": bench.OverheadResult{}}
	for _, b := range p.Benches {
		found := false
		for _, x := range benchmarks {
			found = found || x.name == b.Name
		}
		if !found {
			t.Errorf("docs/papers.yaml: bench %s is not a benchmark of mpsteer bench", b.Name)
			continue
		}
		zero, ok := results[b.Name]
		if !ok {
			t.Errorf("bench %s: add its result type to this test, so that its rows are checked", b.Name)
			continue
		}
		data, err := json.Marshal(zero)
		if err != nil {
			t.Fatal(err)
		}
		var doc map[string]any
		if err := json.Unmarshal(data, &doc); err != nil {
			t.Fatal(err)
		}
		for _, r := range b.Rows {
			if _, err := reproduce.Lookup(doc, r.Value); err != nil {
				t.Errorf("bench %s, row %q: %v", b.Name, r.What, err)
			}
		}
	}
}
