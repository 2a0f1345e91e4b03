package config

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/policy"
	"mpsteer/internal/testutil"
)

// TestMain: the fuzz targets here run without minimization by default
// (testutil.FuzzMain says why).
func TestMain(m *testing.M) { os.Exit(testutil.FuzzMain(m)) }

// parseDeadline is how long one parse may take before the fuzz target
// fails with the input: a config within yamlcfg's bounds parses in
// milliseconds, so only an input that stalls the parser gets near it.
const parseDeadline = 5 * time.Second

// Any bytes as a daemon config: an error naming the file, or a config, and
// never a parse that does not return. testdata/fuzz/FuzzParseConfig holds
// the inputs that cost the parser most before yamlcfg bounded them.
func FuzzParseConfig(f *testing.F) {
	f.Add([]byte("interval: 100ms\npolicies:\n  - {name: prefer, paths: [wlan0]}\n  - {name: dynthresh}\n"))
	f.Add([]byte("policies: [{name: fullmesh, subflows_per_pair: 4, interfaces: [a], exclude: [b]}]"))
	f.Add([]byte("policies: [{name: incremental, steps: [200KiB, 2MiB], shared: [[a, b]]}]"))
	f.Add([]byte("policies: [{name: ecf, headroom: 90%}, {name: limit, rates: {wwan0: 5mbit}}]"))
	f.Add([]byte("chains: [{dev: eth0, hook: ingress, select: 'type(data-ack)', act: set_backup}]"))
	f.Add([]byte("interval: 1ms\nbackup_via: magic"))
	f.Fuzz(func(t *testing.T, b []byte) {
		type result struct {
			cfg *Config
			err error
		}
		done := make(chan result, 1)
		go func() {
			cfg, err := Parse("c.yaml", b, policy.Env{})
			done <- result{cfg, err}
		}()
		var r result
		select {
		case r = <-done:
		case <-time.After(parseDeadline):
			t.Fatalf("Parse did not return within %v on %q", parseDeadline, b)
		}
		cfg, err := r.cfg, r.err
		if err != nil && !bytes.Contains([]byte(err.Error()), []byte("c.yaml")) {
			t.Fatalf("error without the file name: %v", err)
		}
		if err == nil && cfg.Interval < 10e6 {
			t.Fatalf("accepted interval %v", cfg.Interval)
		}
	})
}

// The inputs in testdata/fuzz/FuzzParseConfig, with the error each must
// give: the same class that cost the scenario parser most (aliases walked
// as copies, nesting), refused by yamlcfg before the config is read. They
// are short: as seeds, the fuzzer minimizes what it derives from them, at
// a cost quadratic in their length.
func TestParseConfigRefusesCostlyInputs(t *testing.T) {
	want := map[string]string{
		"alias-bomb":              "c.yaml:5: l4[7]: alias *l3 makes the document more than 100000 values long",
		"alias-inside-its-anchor": "c.yaml:1: policies[0].paths: alias *p is inside the value anchored &p",
		"deep-nesting":            "c.yaml:1: policies[0].paths" + strings.Repeat("[0]", 61) + ": mappings and lists are nested deeper than 64 levels",
	}
	files, _ := filepath.Glob("testdata/fuzz/FuzzParseConfig/*")
	if len(files) != len(want) {
		t.Errorf("%d inputs in testdata/fuzz/FuzzParseConfig, %d here", len(files), len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			head, lit, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
			src, err := strconv.Unquote(strings.TrimSuffix(strings.TrimPrefix(lit, "[]byte("), ")"))
			if head != "go test fuzz v1" || err != nil {
				t.Fatalf("%s is not a go test fuzz v1 file of one []byte: %v", f, err)
			}
			_, err = Parse("c.yaml", []byte(src), policy.Env{})
			w, ok := want[filepath.Base(f)]
			switch {
			case !ok:
				t.Fatalf("no expectation for %s", f)
			case err == nil || !strings.Contains(err.Error(), w):
				t.Fatalf("got %v\nwant an error containing %q", err, w)
			}
		})
	}
}

// 320 aliases of a policy whose paths are 320 aliases: each policy is read
// (and made canonical) in full, 180 ms before yamlcfg counted aliases as
// copies, quadratic in the file's length (2000 of each, 12 KB, took 4.8 s).
func TestParseConfigRefusesAliasedPolicies(t *testing.T) {
	list := func(item string, n int) string { return strings.TrimSuffix(strings.Repeat(item+",", n), ",") }
	src := "s: &s wlan0\nl: &l [" + list("*s", 320) + "]\np: &p {name: prefer, paths: *l}\npolicies: [" + list("*p", 320) + "]\n"
	_, err := Parse("c.yaml", []byte(src), policy.Env{})
	if want := "c.yaml:4: policies[305]: alias *p makes the document more than 100000 values long"; err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("got %v\nwant an error containing %q", err, want)
	}
}
