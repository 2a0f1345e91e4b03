package kernelmatrix

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/testutil"
)

func TestParseStream(t *testing.T) {
	f, err := os.Open("testdata/stream.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ts, err := ParseStream(f, "mpsteer/internal/pm")
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]Test{}
	for _, x := range ts {
		got[x.Name] = x
	}
	if len(ts) != 4 {
		t.Fatalf("tests %+v, want the four top-level ones", ts)
	}
	if a := got["TestA"]; a.Outcome != Fail || !strings.Contains(a.Reason, "the sub-test's words") {
		t.Errorf("TestA: %+v", a)
	}
	if b := got["TestB"]; b.Outcome != Skip || b.Reason != "b_test.go:3: kernel lacks listener-events: it arrived in Linux 6.2" {
		t.Errorf("TestB: %+v", b)
	}
	if c := got["TestC"]; c.Outcome != Pass || c.Seconds != 1.5 || c.Package != "mpsteer/internal/pm" {
		t.Errorf("TestC: %+v", c)
	}
	// The binary died in TestD: it failed, saying how.
	if d := got["TestD"]; d.Outcome != Fail || !strings.Contains(d.Reason, "test timed out after 10m0s") {
		t.Errorf("TestD: %+v", d)
	}
	r := &Result{Kernel: "6.1.0-50-amd64", Tests: ts}
	if s := r.Summary(); s != "kernel 6.1.0-50-amd64: 1 passed, 2 failed, 1 skipped" {
		t.Errorf("summary %q", s)
	}
}

// A package whose binary never ran has a failed "(package)" test.
func TestParseStreamOfABinaryThatDidNotRun(t *testing.T) {
	ts, err := ParseStream(strings.NewReader("test2json: fork/exec x.test: no such file or directory\n"), "mpsteer/internal/x")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Name != "(package)" || ts[0].Outcome != Fail || !strings.Contains(ts[0].Reason, "no such file") {
		t.Fatalf("%+v", ts)
	}
}

// The package is the one the stream names: a file's name (with / as _)
// cannot say whether an _ was a /.
func TestParseStreamTakesThePackageTheStreamNames(t *testing.T) {
	stream := `{"Action":"start","Package":"mpsteer/internal/datapath/bpf/actors/set_backup"}
{"Action":"run","Package":"mpsteer/internal/datapath/bpf/actors/set_backup","Test":"TestX"}
{"Action":"pass","Package":"mpsteer/internal/datapath/bpf/actors/set_backup","Test":"TestX","Elapsed":0.5}
{"Action":"pass","Package":"mpsteer/internal/datapath/bpf/actors/set_backup","Elapsed":0.6}
`
	ts, err := ParseStream(strings.NewReader(stream), "mpsteer/internal/datapath/bpf/actors/set/backup")
	if err != nil {
		t.Fatal(err)
	}
	if len(ts) != 1 || ts[0].Package != "mpsteer/internal/datapath/bpf/actors/set_backup" || ts[0].Outcome != Pass {
		t.Fatalf("%+v", ts)
	}
}

func TestVersionOrder(t *testing.T) {
	if !versionLess("6.1.0-50-amd64", "6.12.95+deb12-amd64") || !versionLess("6.12.95+deb12-amd64", "6.12.117+deb13-amd64") ||
		!versionLess("6.12.117+deb13-amd64", "6.18.44-fc-v657") || versionLess("6.18.44", "6.2.1") {
		t.Error("kernel versions out of order")
	}
}

// docs/kernels.md is what Render makes of docs/data/kernels: regenerate
// it with `make kernels-doc` after `make test-kernels`.
func TestKernelsDocIsCurrent(t *testing.T) {
	root := testutil.RepoRoot()
	rs, err := Load(filepath.Join(root, "docs/data/kernels"))
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) == 0 {
		t.Fatal("no results in docs/data/kernels (make test-kernels, then make kernels-doc)")
	}
	doc, err := os.ReadFile(filepath.Join(root, "docs/kernels.md"))
	if err != nil {
		t.Fatal(err)
	}
	if string(doc) != Render(rs) {
		t.Error("docs/kernels.md is not what docs/data/kernels/*.json render to: run make kernels-doc")
	}
	// Each result says where it comes from, as every data file does.
	for _, r := range rs {
		if msg := r.Provenance.Check(); msg != "" {
			t.Errorf("docs/data/kernels/%s.json: %s", r.Kernel, msg)
		} else if r.Provenance.Kernel != r.Kernel {
			t.Errorf("docs/data/kernels/%s.json: provenance names kernel %s", r.Kernel, r.Provenance.Kernel)
		}
	}
}
