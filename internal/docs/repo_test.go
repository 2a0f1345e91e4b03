package docs

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"mpsteer/internal/docs/legacy"
)

const repo = "../.."

// copyRepo copies what the documents draw on (README.md, docs/ without its
// plots, scenarios/) to a temporary directory, which a test may then spoil.
func copyRepo(t *testing.T) Site {
	t.Helper()
	root := t.TempDir()
	copyFile := func(rel string) {
		b, err := os.ReadFile(filepath.Join(repo, rel))
		if err != nil {
			t.Fatal(err)
		}
		dst := filepath.Join(root, rel)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	copyFile("README.md")
	for _, dir := range []string{"docs", "scenarios"} {
		err := filepath.WalkDir(filepath.Join(repo, dir), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || strings.HasSuffix(p, ".png") {
				return err
			}
			rel, _ := filepath.Rel(repo, p)
			copyFile(rel)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	s := Default(root)
	return s
}

func edit(t *testing.T, s Site, rel, old, new string) {
	t.Helper()
	p := filepath.Join(s.Root, rel)
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(b), old) {
		t.Fatalf("%s lacks %q", rel, old)
	}
	if err := os.WriteFile(p, []byte(strings.Replace(string(b), old, new, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
}

func render(t *testing.T, s Site) *Result {
	t.Helper()
	res, err := s.Render()
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// The repository's documents say what their data give (what make
// docs-check checks; this test runs it without building the binary).
func TestRepositoryDocsMatchTheirData(t *testing.T) {
	res := render(t, Default(repo))
	if !res.OK() {
		t.Errorf("make docs renders the figures; differ:\n%s\nproblems:\n%s", strings.Join(res.Differ, "\n"), strings.Join(res.Problems, "\n"))
	}
}

// A figure edited by hand in a copy of the documents: the check names the
// figure, its line, what the text says and what the data give.
func TestCheckNamesAFigureEditedByHand(t *testing.T) {
	s := copyRepo(t)
	if res := render(t, s); !res.OK() {
		t.Fatalf("the copy does not check before the edit: %v %v", res.Differ, res.Problems)
	}
	const spec = "<!-- fig: ecf-50-10-1m ratio mptcp+ecf/mptcp -->"
	doc, err := os.ReadFile(filepath.Join(s.Root, "docs/results.md"))
	if err != nil {
		t.Fatal(err)
	}
	i := strings.Index(string(doc), spec)
	if i < 0 {
		t.Fatalf("docs/results.md lacks %s", spec)
	}
	rest := string(doc)[i+len(spec):]
	was := rest[:strings.Index(rest, "<!-- /fig -->")]
	line := strings.Count(string(doc)[:i], "\n") + 1
	edit(t, s, "docs/results.md", spec+was, spec+"+5.0% (95% CI +4.0 to +6.0%, n = 6)")
	res := render(t, s)
	if len(res.Differ) != 1 || len(res.Problems) != 0 {
		t.Fatalf("one figure differs; got differ %v, problems %v", res.Differ, res.Problems)
	}
	want := "docs/results.md:" + itoa(line) + ": fig `ecf-50-10-1m ratio mptcp+ecf/mptcp` reads \"+5.0% (95% CI +4.0 to +6.0%, n = 6)\"; the data give \"" + was + "\""
	if res.Differ[0] != want {
		t.Errorf("differ: %s\nwant:   %s", res.Differ[0], want)
	}
	// A table's cell, too (the row's first figure, whatever it reads).
	s2 := copyRepo(t)
	const row = "| ecf-50-10-512k: one flow, 512 KiB buffers | "
	i = strings.Index(string(doc), row)
	if i < 0 {
		t.Fatalf("docs/results.md lacks the row %q", row)
	}
	cell := string(doc)[i+len(row):]
	cell = cell[:strings.Index(cell, " |")]
	edit(t, s2, "docs/results.md", row+cell+" |", row+"48.8 Mbit/s (n = 1) |")
	res = render(t, s2)
	if len(res.Differ) != 1 || !strings.Contains(res.Differ[0], "docs/results.md:") || !strings.Contains(res.Differ[0], "table `ecf` reads") {
		t.Errorf("differ %v", res.Differ)
	}
	// And what make docs writes back checks again.
	if _, err := s2.Write(res); err != nil {
		t.Fatal(err)
	}
	if res := render(t, s2); !res.OK() {
		t.Errorf("after make docs: %v %v", res.Differ, res.Problems)
	}
}

// A data file removed (not archived): the figures over it fail, naming
// the file, and so does the archive's accounting.
func TestCheckNamesAMissingDataFile(t *testing.T) {
	s := copyRepo(t)
	// A measured scenario's results.json, a legacy one's (the first
	// legacy.yaml lists), and the first archived file it accounts for.
	if err := os.Remove(filepath.Join(s.Root, "docs/data/ecf-50-10-1m/results.json")); err != nil {
		t.Fatal(err)
	}
	legacyName, source := firstLegacyScenario(t), firstArchived(t)
	if err := os.Remove(filepath.Join(s.Root, "docs/data/"+legacyName+"/results.json")); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(s.Root, "docs/data", source)); err != nil {
		t.Fatal(err)
	}
	res := render(t, s)
	got := strings.Join(res.Problems, "\n")
	for _, want := range []string{
		"fig `ecf-50-10-1m ratio mptcp+ecf/mptcp`: docs/data/ecf-50-10-1m/results.json is missing",
		"table `ecf`:",
		"docs/data/" + legacyName + "/results.json is missing: `mpsteer docs legacy` makes it from its sources in docs/data/legacy.yaml",
		"docs/data/legacy.yaml names docs/data/" + source + ", which is not there",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("problems lack %q:\n%s", want, got)
		}
	}
}

// Data changed by hand: a converted file's figure, a file without
// provenance, an archived file nobody accounts for.
func TestCheckNamesDataChangedByHand(t *testing.T) {
	s := copyRepo(t)
	edit(t, s, "docs/data/tenants-bg0/results.json", `"goodput_mbit": 187.`, `"goodput_mbit": 197.`)
	// A scenario whose results.json is converted from legacy sources (the
	// first legacy.yaml lists: scenarios leave the list as they are
	// measured again).
	legacy := firstLegacyScenario(t)
	rel := "docs/data/" + legacy + "/results.json"
	b, err := os.ReadFile(filepath.Join(s.Root, rel))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`"goodput_mbit": [0-9]`).Find(b)
	if m == nil {
		t.Fatalf("%s has no goodput_mbit", rel)
	}
	edit(t, s, rel, string(m), `"goodput_mbit": 9`+string(m[len(m)-1:]))
	if err := os.WriteFile(filepath.Join(s.Root, "docs/data/bench/extra.json"), []byte(`{"ns": 1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.Root, "docs/data/archive/stray.json"), []byte(`[]`), 0o644); err != nil {
		t.Fatal(err)
	}
	res := render(t, s)
	got := strings.Join(append(res.Differ, res.Problems...), "\n")
	for _, want := range []string{
		"docs/data/tenants-bg0/results.json: variants.mptcp+spread.goodput_mbit: says median",
		rel + " is not what `mpsteer docs legacy` makes of its sources",
		"docs/data/bench/extra.json: no provenance",
		"docs/data/archive/stray.json is not accounted for in docs/data/legacy.yaml",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("the check lacks %q:\n%s", want, got)
		}
	}
}

// firstLegacyScenario is the first scenario docs/data/legacy.yaml converts.
func firstLegacyScenario(t *testing.T) string {
	t.Helper()
	mf := manifest(t)
	if len(mf.Scenarios) == 0 {
		t.Skip("no scenario is converted from legacy sources any more")
	}
	return mf.Scenarios[0].Name
}

// firstArchived is the first file docs/data/legacy.yaml lists as
// archived (used by no figure), relative to docs/data.
func firstArchived(t *testing.T) string {
	t.Helper()
	mf := manifest(t)
	if len(mf.Archived) == 0 {
		t.Skip("legacy.yaml archives no file")
	}
	return mf.Archived[0].File
}

func manifest(t *testing.T) *legacy.Manifest {
	t.Helper()
	mf, err := legacy.LoadManifest(filepath.Join(repo, "docs/data/legacy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return mf
}
