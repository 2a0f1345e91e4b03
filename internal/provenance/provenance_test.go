package provenance

import (
	"encoding/json"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

func TestCollect(t *testing.T) {
	p := Collect("0.1.0+git803c952", []string{"/usr/bin/mpsteer", "lab", "run", "a b.yaml", "--runs", "5"})
	if p.Commit != "803c952" {
		t.Errorf("commit %q, want the one in the version string", p.Commit)
	}
	if p.Command != `mpsteer lab run "a b.yaml" --runs 5` {
		t.Errorf("command %q", p.Command)
	}
	if p.Kernel == "" || p.Host.CPUs < 1 {
		t.Errorf("kernel %q, cpus %d", p.Kernel, p.Host.CPUs)
	}
	start, err := time.Parse(time.RFC3339, p.Date)
	if err != nil || time.Since(start) > time.Minute || !strings.HasSuffix(p.Date, "Z") {
		t.Errorf("date %q (%v): want now, UTC, RFC 3339", p.Date, err)
	}
	if p.Finished != "" {
		t.Errorf("finished before Finish: %q", p.Finished)
	}
	p.Finish()
	if _, err := time.Parse(time.RFC3339, p.Finished); err != nil {
		t.Errorf("finished %q: %v", p.Finished, err)
	}
	// Without +git in the version, the commit comes from the build or
	// the checkout the test runs in, at most 12 characters.
	if q := Collect("dev", nil); len(q.Commit) > 12 || q.Command != "" {
		t.Errorf("dev build: commit %q, command %q", q.Commit, q.Command)
	}
	if head, err := exec.Command("git", "rev-parse", "HEAD").Output(); err == nil {
		if q := Collect("dev", nil); q.Commit == "" || !strings.HasPrefix(string(head), q.Commit) {
			t.Errorf("in a checkout at %s: commit %q", head, q.Commit)
		}
	}
}

func TestAttachPutsProvenanceFirst(t *testing.T) {
	p := Provenance{Commit: "abc1234", Command: "mpsteer bench rate", Kernel: "6.18", Date: "2026-01-01T00:00:00Z"}
	type res struct {
		Zeta  int `json:"zeta"`
		Alpha int `json:"alpha"`
	}
	b, err := Attach(res{1, 2}, p)
	if err != nil {
		t.Fatal(err)
	}
	keys := regexp.MustCompile(`(?m)^  "([a-z_]+)":`).FindAllStringSubmatch(string(b), -1)
	var order []string
	for _, k := range keys {
		order = append(order, k[1])
	}
	if strings.Join(order, ",") != "provenance,zeta,alpha" {
		t.Fatalf("top-level keys %v, want provenance then the result's own in order:\n%s", order, b)
	}
	var back struct {
		Provenance Provenance `json:"provenance"`
		Zeta       int        `json:"zeta"`
	}
	if err := json.Unmarshal(b, &back); err != nil || back.Provenance.Commit != "abc1234" || back.Zeta != 1 {
		t.Fatalf("%v %+v", err, back)
	}
	// An empty object and a list.
	if b, err := Attach(struct{}{}, p); err != nil || !json.Valid(b) {
		t.Fatalf("empty object: %v %s", err, b)
	}
	b, err = Attach([]int{1, 2}, p)
	var wrapped struct {
		Results []int `json:"results"`
	}
	if err != nil || json.Unmarshal(b, &wrapped) != nil || len(wrapped.Results) != 2 {
		t.Fatalf("list: %v %s", err, b)
	}
}

func TestCheckAndSummary(t *testing.T) {
	full := Provenance{Commit: "803c952", Command: "mpsteer lab run x", Kernel: "6.18.44", Date: "2026-11-26T10:00:00Z"}
	if msg := full.Check(); msg != "" {
		t.Errorf("complete provenance: %s", msg)
	}
	if s := full.Summary(); s != "commit 803c952, kernel 6.18.44, 2026-11-26" {
		t.Errorf("summary %q", s)
	}
	dirty := full
	dirty.Dirty = true
	if s := dirty.Summary(); s != "commit 803c952 (with uncommitted changes), kernel 6.18.44, 2026-11-26" {
		t.Errorf("dirty summary %q", s)
	}
	noKernel := full
	noKernel.Kernel = ""
	if msg := noKernel.Check(); msg != "provenance without kernel" {
		t.Errorf("no kernel: %q", msg)
	}
	unknown := full
	unknown.Kernel = "unknown"
	if msg := unknown.Check(); !strings.Contains(msg, "not marked legacy") {
		t.Errorf("unknown, not legacy: %q", msg)
	}
	unknown.Legacy = "recorded before provenance was kept"
	if msg := unknown.Check(); msg != "" {
		t.Errorf("legacy with an unknown kernel: %q", msg)
	}
	if s := unknown.Summary(); s != "legacy (recorded before provenance was kept): commit 803c952, 2026-11-26" {
		t.Errorf("legacy summary %q", s)
	}
	var none *Provenance
	if msg := none.Check(); !strings.Contains(msg, "no provenance") {
		t.Errorf("nil: %q", msg)
	}
}

// Legacy data have no host, and say so by leaving it out; a measurement
// always records its host.
func TestHostLeftOutWhenNotRecorded(t *testing.T) {
	b, err := json.Marshal(Provenance{Commit: "abc1234", Legacy: "recorded before provenance was kept", Sources: []string{"a.json"}})
	if err != nil || strings.Contains(string(b), "host") || !strings.Contains(string(b), `"sources":["a.json"]`) {
		t.Errorf("legacy: %s %v", b, err)
	}
	b, err = json.Marshal(Collect("dev", nil))
	if err != nil || !strings.Contains(string(b), `"host":{"cpus":`) || strings.Contains(string(b), "legacy") {
		t.Errorf("measured: %s %v", b, err)
	}
}
