package main

import (
	"fmt"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/runner"
	"mpsteer/internal/lab/world"
)

// What the commands that report print with --json, where the daemon or
// the lab answers with less than a whole object.

// chainOpResult is `chain del|release|replace|move --json`: the chain, the
// operation and the daemon's answer.
func chainOpResult(id uint64, op string, answer map[string]any) map[string]any {
	if op == "" {
		op = "del"
	}
	out := map[string]any{"chain": id, "op": op, "ok": true}
	for k, v := range answer {
		if _, taken := out[k]; !taken {
			out[k] = v
		}
	}
	return out
}

// printDown is `lab down`'s output: nothing for people (as before), the
// removed labs for --json.
func printDown(asJSON bool, names []string) error {
	if !asJSON {
		return nil
	}
	if names == nil {
		names = []string{}
	}
	return printJSON(map[string]any{"removed": names})
}

// LabSetResult is `lab set --json`: the path or link changed, what was
// done, and the link's state afterwards (per direction).
type LabSetResult struct {
	Target string           `json:"target"`
	Link   string           `json:"link"`
	Op     string           `json:"op"`
	State  *world.LinkState `json:"state,omitempty"`
}

func labSetResult(target, link, op string, resp *world.Response) LabSetResult {
	r := LabSetResult{Target: target, Link: link, Op: op}
	if resp != nil {
		if st, ok := resp.Links[link]; ok {
			r.State = &st
		}
	}
	return r
}

// LabRunResult is `lab run --json`: where the files are, and each
// variant's median run in brief (results.json has every run and figure).
type LabRunResult struct {
	Out      string           `json:"out"`
	Results  string           `json:"results"`
	Report   string           `json:"report"`
	Plots    []string         `json:"plots"`
	Variants []report.Compact `json:"variants"`
}

func labRunResult(res *runner.Result) LabRunResult {
	r := LabRunResult{Out: res.Out, Results: fmt.Sprintf("%s/results.json", res.Out), Report: res.Report, Plots: []string{fmt.Sprintf("%s/compare.png", res.Out)}}
	for _, s := range res.Summaries {
		r.Variants = append(r.Variants, s.Compacted())
		r.Plots = append(r.Plots, fmt.Sprintf("%s/%s/goodput.png", res.Out, s.Variant))
	}
	return r
}
