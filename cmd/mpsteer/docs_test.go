package main

import (
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// make docs-check is `mpsteer docs render --check`: exit 0 on the
// repository, 1 naming the figure once one is edited by hand.
func TestDocsCheckExitStatus(t *testing.T) {
	_, stderr, status := runMain(t, nil, "docs", "render", "--check", "--root", "../..")
	if status != 0 {
		t.Fatalf("docs check of the repository: exit %d\n%s", status, stderr)
	}
	root := t.TempDir()
	for _, src := range []string{"README.md", "docs", "scenarios"} {
		err := filepath.WalkDir(filepath.Join("../..", src), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() || strings.HasSuffix(p, ".png") {
				return err
			}
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			rel, _ := filepath.Rel("../..", p)
			dst := filepath.Join(root, rel)
			if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
				return err
			}
			if rel == "README.md" {
				b = []byte(strings.Replace(string(b), "metric=share:cell -->", "metric=share:cell -->12.0% (n = 9)", 2))
			}
			return os.WriteFile(dst, b, 0o644)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	_, stderr, status = runMain(t, nil, "docs", "render", "--check", "--root", root)
	if status != 1 || !strings.Contains(stderr, "README.md:") || !strings.Contains(stderr, "fig `demo value mptcp metric=share:cell` reads \"12.0% (n = 9)") {
		t.Errorf("an edited figure: exit %d\n%s", status, stderr)
	}
	// make docs renders it back.
	if _, stderr, status = runMain(t, nil, "docs", "render", "--root", root); status != 0 {
		t.Fatalf("docs render: exit %d\n%s", status, stderr)
	}
	if _, stderr, status = runMain(t, nil, "docs", "render", "--check", "--root", root); status != 0 {
		t.Errorf("after docs render: exit %d\n%s", status, stderr)
	}
}
