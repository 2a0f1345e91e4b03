package main

import (
	"encoding/json"
	"strings"
	"testing"
)

// Every command that reports takes --json.
func TestEveryReportingCommandHasJSON(t *testing.T) {
	root := newRootCmd()
	for _, path := range []string{"status", "prefer", "policy apply", "monitor", "version", "chain add", "chain list", "chain del",
		"chain replace", "chain move", "chain release", "chain load", "lab up", "lab ls", "lab set", "lab down", "lab run", "lab table", "lab check", "bench"} {
		c, _, err := root.Find(strings.Fields(path))
		if err != nil || c.Name() != strings.Fields(path)[len(strings.Fields(path))-1] {
			t.Errorf("%s: no such command (%v)", path, err)
			continue
		}
		if c.Flags().Lookup("json") == nil {
			t.Errorf("mpsteer %s has no --json", path)
		}
	}
}

func TestVersionJSON(t *testing.T) {
	out, _, err := runCLI(t, "version", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var v VersionInfo
	if err := json.Unmarshal([]byte(out), &v); err != nil || v.Version == "" || !strings.HasPrefix(v.GoVersion, "go") {
		t.Fatalf("version --json: %q (%v)", out, err)
	}
	out, _, _ = runCLI(t, "version")
	if !strings.HasPrefix(out, "mpsteer "+v.Version) {
		t.Fatalf("version: %q", out)
	}
}

// The daemon's help (and so its man page) says how it reloads, what it
// needs and what it reports to systemd.
func TestDaemonHelpIsComplete(t *testing.T) {
	out, _, err := runCLI(t, "daemon", "--help")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"--metrics", "--watch-config", "--state-dir", "SIGHUP", "CAP_NET_ADMIN", "CAP_BPF", "CAP_PERFMON", "Type=notify", "/etc/mpsteer/mpsteer.yaml"} {
		if !strings.Contains(out, want) {
			t.Errorf("daemon --help lacks %q", want)
		}
	}
}
