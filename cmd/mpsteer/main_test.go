package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"mpsteer/internal/lab/check"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
)

// The test binary doubles as the mpsteer command: with runMainEnv set it
// runs main() on its arguments, so that tests see real exit statuses and
// stderr without building anything.
const (
	runMainEnv   = "MPSTEER_CLI_TEST_RUN_MAIN"
	fakeCheckEnv = "MPSTEER_CLI_TEST_FAKE_CHECK" // "met" or "missed"
)

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "" && len(os.Args) > 1 && !strings.HasPrefix(os.Args[1], "-test.") {
		// Started as a command (say, by a lab run as its emulator) but not
		// by runMain: refuse, rather than run every test again.
		fmt.Fprintf(os.Stderr, "mpsteer test binary started as %q without %s; refusing\n", os.Args[1:], runMainEnv)
		os.Exit(2)
	}
	if os.Getenv(runMainEnv) != "" {
		switch os.Getenv(fakeCheckEnv) {
		case "met":
			runCheck = fakeCheck(true)
		case "missed":
			runCheck = fakeCheck(false)
		}
		main()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeCheck stands in for the emulator check: every target met, or the
// 100 mbit rate missed.
func fakeCheck(met bool) func(context.Context, check.Options) (*check.Report, error) {
	return func(context.Context, check.Options) (*check.Report, error) {
		r := checkReport()
		if !met {
			r.Goodput[1].Pass = false
			r.Pass = false
		}
		return r, nil
	}
}

func checkReport() *check.Report {
	return &check.Report{
		RTT:        []check.RTTResult{{DelayMs: 10, Probes: 1000, Pass: true}},
		Goodput:    []check.GoodputResult{{RateMbit: 10, Pass: true}, {RateMbit: 100, Pass: true}},
		Loss:       []check.LossResult{{ConfiguredPct: 1, Pass: true}},
		Outage:     check.OutageResult{ConfiguredS: 2, Pass: true},
		Concurrent: []check.GoodputResult{{RateMbit: 400, Pass: true}, {RateMbit: 400, Pass: true}},
		Pass:       true,
	}
}

// runCLI runs the command tree in-process with args and returns what it
// printed and the error main would report.
func runCLI(t *testing.T, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	oldOut, oldErr := os.Stdout, os.Stderr
	outR, outW, perr := os.Pipe()
	if perr != nil {
		t.Fatal(perr)
	}
	errR, errW, perr := os.Pipe()
	if perr != nil {
		t.Fatal(perr)
	}
	var outB, errB bytes.Buffer
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); io.Copy(&outB, outR) }()
	go func() { defer wg.Done(); io.Copy(&errB, errR) }()
	os.Stdout, os.Stderr = outW, errW
	root := newRootCmd()
	root.SetArgs(args)
	err = root.Execute()
	os.Stdout, os.Stderr = oldOut, oldErr
	outW.Close()
	errW.Close()
	wg.Wait()
	outR.Close()
	errR.Close()
	return outB.String(), errB.String(), err
}

// runMain runs main() in a child process (this test binary) and returns
// its output and exit status.
func runMain(t *testing.T, env []string, args ...string) (stdout, stderr string, status int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), runMainEnv+"=1"), env...)
	var outB, errB bytes.Buffer
	cmd.Stdout, cmd.Stderr = &outB, &errB
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		status = ee.ExitCode()
	case err != nil:
		t.Fatalf("run %v: %v", args, err)
	}
	return outB.String(), errB.String(), status
}

// ---- lab ls --json ------------------------------------------------------------

func TestLabLsJSONIsAList(t *testing.T) {
	// The machine's own labs: other tests may have labs up right now, so
	// this checks the shape, not the count.
	out, _, err := runCLI(t, "lab", "ls", "--json")
	if err != nil {
		t.Fatalf("lab ls --json: %v", err)
	}
	var labs []map[string]any
	if err := json.Unmarshal([]byte(out), &labs); err != nil {
		t.Fatalf("lab ls --json printed no JSON list: %v\n%s", err, out)
	}
	if labs == nil {
		t.Fatalf("lab ls --json printed %q, want a list ([] when no lab is up)", strings.TrimSpace(out))
	}
	for _, l := range labs {
		for _, k := range []string{"name", "scenario", "variant", "hosts", "paths", "state_dir", "emulator_pid"} {
			if _, ok := l[k]; !ok {
				t.Errorf("lab %v has no %q", l["name"], k)
			}
		}
	}
}

func TestLabLsJSONOfPrivateStateRoot(t *testing.T) {
	old := world.StateRoot
	t.Cleanup(func() { world.StateRoot = old })

	// No state directory at all, and an empty one: an empty list.
	for _, root := range []string{filepath.Join(t.TempDir(), "absent"), t.TempDir()} {
		world.StateRoot = root
		out, _, err := runCLI(t, "lab", "ls", "--json")
		if err != nil {
			t.Fatal(err)
		}
		if strings.TrimSpace(out) != "[]" {
			t.Errorf("no lab up: lab ls --json printed %q, want []", out)
		}
	}

	// One lab.
	world.StateRoot = t.TempDir()
	dir := filepath.Join(world.StateRoot, "fake-lab")
	os.MkdirAll(dir, 0o755)
	state := `{"name": "fake-lab", "scenario": "demo", "variant": "mptcp", "emulator_pid": 1234,
		"hosts": [{"role": "client", "netns": "mps-fake-lab-client"}], "paths": []}`
	if err := os.WriteFile(filepath.Join(dir, "world.json"), []byte(state), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, err := runCLI(t, "lab", "ls", "--json")
	if err != nil {
		t.Fatal(err)
	}
	var labs []world.Summary
	if err := json.Unmarshal([]byte(out), &labs); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if len(labs) != 1 || labs[0].Name != "fake-lab" || labs[0].Scenario != "demo" || labs[0].Emulator != 1234 || labs[0].StateDir != dir {
		t.Fatalf("lab ls --json = %+v", labs)
	}
	// Without --json: one line per lab.
	out, _, err = runCLI(t, "lab", "ls")
	if err != nil || !strings.Contains(out, "fake-lab") || !strings.Contains(out, "scenario demo, variant mptcp") {
		t.Fatalf("lab ls = %q, %v", out, err)
	}
}

// ---- lab check ----------------------------------------------------------------

func TestCheckVerdict(t *testing.T) {
	if err := checkVerdict(checkReport()); err != nil {
		t.Fatalf("every target met, verdict %v", err)
	}
	r := checkReport()
	r.RTT[0].Pass = false
	r.Outage.Pass = false
	r.Pass = false
	err := checkVerdict(r)
	if err == nil {
		t.Fatal("targets missed, verdict nil")
	}
	if want := "lab check: 2 target(s) missed: RTT at 10 ms delay; outage 2 s"; err.Error() != want {
		t.Fatalf("verdict %q, want %q", err, want)
	}
	// A report that says it failed without saying where still fails.
	r = checkReport()
	r.Pass = false
	if err := checkVerdict(r); err == nil {
		t.Fatal("Pass false, verdict nil")
	}
}

func TestLabCheckExitStatus(t *testing.T) {
	for _, c := range []struct {
		fake   string
		json   bool
		status int
	}{
		{"met", false, 0}, {"met", true, 0},
		{"missed", false, 1}, {"missed", true, 1},
	} {
		args := []string{"lab", "check"}
		if c.json {
			args = append(args, "--json")
		}
		out, errOut, status := runMain(t, []string{fakeCheckEnv + "=" + c.fake}, args...)
		if status != c.status {
			t.Errorf("%s %v: exit status %d, want %d\nstderr: %s", c.fake, args, status, c.status, errOut)
		}
		if c.json {
			var rep check.Report
			if err := json.Unmarshal([]byte(out), &rep); err != nil {
				t.Errorf("%s %v: stdout is not the JSON report: %v\n%s", c.fake, args, err, out)
			}
			if rep.Pass != (c.fake == "met") {
				t.Errorf("%s %v: JSON pass = %v", c.fake, args, rep.Pass)
			}
		} else if !strings.Contains(out, "all targets met:") {
			t.Errorf("%s %v: no table printed:\n%s", c.fake, args, out)
		}
		if c.fake == "missed" {
			want := "mpsteer: lab check: 1 target(s) missed: rate 100 mbit\n"
			if errOut != want {
				t.Errorf("%s %v: stderr %q, want %q", c.fake, args, errOut, want)
			}
			if !c.json && !strings.Contains(out, "MISSED") {
				t.Errorf("table does not mark the miss:\n%s", out)
			}
		} else if errOut != "" {
			t.Errorf("%s %v: stderr %q, want nothing", c.fake, args, errOut)
		}
	}
}

// ---- chain --before/--after ---------------------------------------------------

func TestChainPlacementFlags(t *testing.T) {
	// No daemon listens here: a command that gets past its own checks
	// fails on the socket instead.
	sock := "--socket=" + filepath.Join(t.TempDir(), "none.sock")
	add := []string{"chain", "add", sock, "--dev", "eth0", "--hook", "ingress", "--act", "count"}
	refused := []struct {
		args []string
		want string
	}{
		{append(add[:len(add):len(add)], "--before", "1", "--after", "2"), "give either --before 1 or --after 2, not both"},
		{[]string{"chain", "move", sock, "3", "--before", "1", "--after", "2"}, "give either --before 1 or --after 2, not both"},
		{[]string{"chain", "move", sock, "3"}, "give the chain to place it next to: --before ID or --after ID"},
		{[]string{"chain", "move", sock, "3", "--after", "0"}, "chain ids start at 1"},
		{append(add[:len(add):len(add)], "--before", "0"), "chain ids start at 1"},
	}
	for _, c := range refused {
		_, _, err := runCLI(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
	}
	// One of them, or none for add, passes the check (and then fails on
	// the missing daemon).
	for _, args := range [][]string{
		add,
		append(add[:len(add):len(add)], "--before", "1"),
		append(add[:len(add):len(add)], "--after", "1"),
		{"chain", "move", sock, "3", "--before", "1"},
		{"chain", "move", sock, "3", "--after", "1"},
	} {
		_, _, err := runCLI(t, args...)
		if err == nil {
			t.Errorf("%v: succeeded without a daemon", args)
		} else if strings.Contains(err.Error(), "--before") || strings.Contains(err.Error(), "chain ids") {
			t.Errorf("%v: refused: %v", args, err)
		}
	}
}

// ---- lab set ------------------------------------------------------------------

func TestLabSetArgumentErrors(t *testing.T) {
	const lab = "no-such-lab-cli-test"
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"lab", "set", lab, "wifi"}, "requires at least 3 arg(s)"},
		{[]string{"lab", "set", lab, "wifi", "rate"}, `"rate" is not key=value (keys: rate, trace, delay`},
		{[]string{"lab", "set", lab, "wifi", "rate="}, `"rate=" is not key=value`},
		{[]string{"lab", "set", lab, "wifi", "rate=10"}, `command line:1: rate: rate "10" has no unit (write e.g. 400mbit, 10kbit, 1MB/s)`},
		{[]string{"lab", "set", lab, "wifi", "rate=0mbit"}, `command line:1: rate: must be above 0bit`},
		{[]string{"lab", "set", lab, "wifi", "speed=1mbit"}, `command line:1: speed: unknown key "speed"`},
		{[]string{"lab", "set", lab, "wifi", "rate=1mbit", "rate=2mbit"}, `command line:2: rate: key "rate" is given twice (first on line 1)`},
		{[]string{"lab", "set", lab, "wifi", "outage=5s"}, "outage schedules are set in the scenario file"},
		{[]string{"lab", "set", lab, "wifi", "delay=10ms", "--dir", "sideways"}, `--dir "sideways" is not valid (valid: both, up, down)`},
		// Good arguments: the missing lab is what is wrong.
		{[]string{"lab", "set", lab, "wifi", "rate=10mbit", "up.delay=5ms"}, `no lab named "` + lab + `" is up`},
		{[]string{"lab", "set", lab, "wifi", "down"}, `no lab named "` + lab + `" is up`},
	}
	for _, c := range cases {
		_, _, err := runCLI(t, c.args...)
		if err == nil {
			t.Errorf("%v: no error, want %q", c.args, c.want)
			continue
		}
		if !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: err = %v, want %q", c.args, err, c.want)
		}
		if strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: more than one error: %v", c.args, err)
		}
	}
}

func TestParseSetArgs(t *testing.T) {
	reqs, err := parseSetArgs([]string{"rate=10mbit", "down.delay=5ms", "up.loss=1%"}, scenario.DirBoth)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != 3 {
		t.Fatalf("%d requests, want 3 (both, down, up): %+v", len(reqs), reqs)
	}
	got := map[scenario.Dir]*scenario.Patch{}
	for _, r := range reqs {
		if r.Op != "set" || r.Patch == nil {
			t.Fatalf("request %+v", r)
		}
		got[r.Dir] = r.Patch
	}
	if p := got[scenario.DirBoth]; p == nil || p.Rate == nil || p.Rate.Mbit() != 10 || p.Delay != nil {
		t.Errorf("both: %+v", p)
	}
	if p := got[scenario.DirDown]; p == nil || p.Delay == nil || p.Delay.Milliseconds() != 5 || p.Rate != nil {
		t.Errorf("down: %+v", p)
	}
	if p := got[scenario.DirUp]; p == nil || p.Loss == nil || *p.Loss != 0.01 {
		t.Errorf("up: %+v", p)
	}
}

// ---- lab run with a bad scenario ------------------------------------------------

func TestLabRunReportsScenarioErrors(t *testing.T) {
	dir := t.TempDir()
	cases := []struct {
		name, src, want string
	}{
		{"rate without unit", "paths:\n  - name: a\n    rate: 10\ntraffic: [{type: bulk, duration: 5s}]\n",
			`:3: paths[0].rate: rate "10" has no unit (write e.g. 400mbit, 10kbit, 1MB/s)`},
		{"duplicate key", "paths: [{name: a}]\ntraffic: [{type: bulk, duration: 5s}]\npaths: [{name: b}]\n",
			`:3: paths: key "paths" is given twice (first on line 1)`},
		{"event after the traffic", "paths: [{name: a}]\ntraffic: [{type: bulk, duration: 5s}]\nevents: [{at: 6s, path: a, action: down}]\n",
			`:3: events[0].at: 6s is not before the traffic ends (at 5s)`},
		{"bad daemon config", "paths: [{name: a}, {name: b}]\ntraffic: [{type: bulk, duration: 5s}]\nvariants:\n  - name: p\n    daemon: {client: {policies: [{name: prefer, k: 0}]}}\n",
			`:5: variants[0].daemon.client.policies[0].k: "0" is not valid`},
	}
	for _, c := range cases {
		f := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		if err := os.WriteFile(f, []byte(c.src), 0o644); err != nil {
			t.Fatal(err)
		}
		// --variants names none: should the file ever pass, the run stops
		// there instead of building a lab.
		_, _, err := runCLI(t, "lab", "run", f, "--out", filepath.Join(dir, "out"), "--variants", "no-such-variant")
		if err == nil || err.Error() != f+c.want && !strings.HasPrefix(err.Error(), f+c.want) {
			t.Errorf("%s: err = %v\nwant %q", c.name, err, f+c.want)
		}
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Errorf("%s: more than one error:\n%v", c.name, err)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "out")); err == nil {
		t.Errorf("a bad scenario created the output directory")
	}

	// As users see it: one line on stderr, exit status 1.
	f := filepath.Join(dir, "rate-without-unit.yaml")
	_, errOut, status := runMain(t, nil, "lab", "run", f, "--variants", "no-such-variant")
	if status != 1 || errOut != "mpsteer: "+f+cases[0].want+"\n" {
		t.Errorf("lab run: exit %d, stderr %q", status, errOut)
	}
	_, errOut, status = runMain(t, nil, "lab", "run", filepath.Join(dir, "absent.yaml"), "--variants", "no-such-variant")
	if status != 1 || !strings.Contains(errOut, "absent.yaml") {
		t.Errorf("lab run of a missing file: exit %d, stderr %q", status, errOut)
	}
}
