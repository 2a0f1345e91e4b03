package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A config whose policy entry carries a key the policy does not use (here
// the paper mode's probe keys in dynthresh's default mode) is refused by
// `mpsteer policy apply` and by `mpsteer daemon --config`, with an error
// naming the file, line and key; neither gets as far as a daemon.
func TestConfigWithAKeyThePolicyDoesNotUseIsRefused(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yaml")
	if err := os.WriteFile(file, []byte("interval: 100ms\npolicies:\n  - {name: dynthresh, probe_interval: 1s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := file + `:3: policies[0].probe_interval: unknown key "probe_interval"`
	for _, args := range [][]string{
		{"policy", "apply", file, "--socket", filepath.Join(dir, "none.sock")},
		{"daemon", "--config", file, "--socket", filepath.Join(dir, "none.sock")},
	} {
		_, _, err := runCLI(t, args...)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("mpsteer %s: err = %v\nwant it to contain %q", strings.Join(args, " "), err, want)
		}
	}
}
