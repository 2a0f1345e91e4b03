package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func progressOf(t *testing.T, file string) *Progress {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p := &Progress{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		p.Line(sc.Text())
	}
	return p
}

// Logs recorded from go test -fuzz: FuzzParseScenario before issue 27's
// fix (both passed), and after it.
func TestProgressOfRecordedRuns(t *testing.T) {
	for _, c := range []struct {
		file          string
		execs         int64
		stall, from   time.Duration
		wantProblems  []string
		wantNoProblem bool
	}{
		// One worker: 42 inputs, then none for the rest of the run.
		{file: "scenario-before-1-worker.log", execs: 42, stall: 38 * time.Second, from: 3 * time.Second,
			wantProblems: []string{"ran no input for 38s (from 3s into the run to 41s), more than 5s", "ran 42 inputs, fewer than 1000"}},
		// Two workers: bursts of minimization counts between stalls.
		{file: "scenario-before-2-workers.log", execs: 590413, stall: 9 * time.Second, from: 6 * time.Second,
			wantProblems: []string{"ran no input for 9s (from 6s into the run to 15s), more than 5s"}},
		// The last two lines are the end of the run, a moment apart.
		{file: "scenario-after.log", execs: 36687, stall: 0, wantNoProblem: true},
	} {
		t.Run(c.file, func(t *testing.T) {
			p := progressOf(t, filepath.Join("testdata", c.file))
			if p.Execs != c.execs || p.Stall != c.stall || p.StallFrom != c.from {
				t.Errorf("execs %d, stall %v from %v; want %d, %v from %v", p.Execs, p.Stall, p.StallFrom, c.execs, c.stall, c.from)
			}
			got := p.Problems(5*time.Second, 1000)
			if c.wantNoProblem && len(got) > 0 {
				t.Errorf("problems %q, want none", got)
			}
			if !c.wantNoProblem && strings.Join(got, "\n") != strings.Join(c.wantProblems, "\n") {
				t.Errorf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(c.wantProblems, "\n"))
			}
		})
	}
}

// FuzzFine's run in a CI run of 762081e: it fuzzed its 10 s and go test
// failed it with Go's fuzz coordinator's own deadline (go.dev/issue/75804).
// That is not a finding; a failure with another message, with a failing
// input written, or before the fuzz time is.
func TestDeadlineRace(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("testdata", "fine-deadline-race.log"))
	if err != nil {
		t.Fatal(err)
	}
	parse := func(log string) *Progress {
		p := &Progress{}
		for _, l := range strings.Split(log, "\n") {
			p.Line(l)
		}
		return p
	}
	recorded := string(raw)
	p := parse(recorded)
	if got := p.Problems(5*time.Second, 1000); len(got) > 0 {
		t.Errorf("problems %q, want none", got)
	}
	if !p.DeadlineRace(10 * time.Second) {
		t.Errorf("the recorded run is not taken for the deadline race: failure %q at %v", p.failure, p.failedAt)
	}
	for name, c := range map[string]struct {
		log      string
		fuzzTime time.Duration
	}{
		"no fuzz time (a count)":   {recorded, 0},
		"before the fuzz time":     {recorded, 20 * time.Second},
		"another message":          {strings.Replace(recorded, "    context deadline exceeded", "    fake_test.go:9: boom", 1), 10 * time.Second},
		"a second message":         {strings.Replace(recorded, "    context deadline exceeded", "    context deadline exceeded\n    fake_test.go:9: boom", 1), 10 * time.Second},
		"an input written":         {strings.Replace(recorded, "    context deadline exceeded", "    context deadline exceeded\n\n    Failing input written to testdata/fuzz/FuzzFine/5e1c", 1), 10 * time.Second},
		"an input written outside": {strings.Replace(recorded, "exit status 1", "Failing input written to testdata/fuzz/FuzzFine/5e1c\nexit status 1", 1), 10 * time.Second},
		"no failure line":          {strings.Replace(recorded, "--- FAIL: FuzzFine (10.06s)", "", 1), 10 * time.Second},
	} {
		if p := parse(c.log); p.DeadlineRace(c.fuzzTime) {
			t.Errorf("%s: taken for the deadline race", name)
		}
	}
}

func TestProgressWithoutLines(t *testing.T) {
	p := &Progress{}
	p.Line("# mpsteer/internal/x")
	p.Line("x_test.go:3:1: syntax error")
	if got := p.Problems(5*time.Second, 1000); len(got) != 1 || got[0] != "go test printed no fuzzing progress" {
		t.Errorf("problems %q", got)
	}
	// FuzzHealthParser loads a BPF program in every worker: on a busy
	// machine its seeds outlasted FUZZTIME=8s.
	p = &Progress{}
	for _, l := range []string{
		"fuzz: elapsed: 0s, gathering baseline coverage: 0/24 completed",
		"fuzz: elapsed: 3s, gathering baseline coverage: 0/24 completed",
		"fuzz: elapsed: 9s, gathering baseline coverage: 0/24 completed",
		"PASS",
	} {
		p.Line(l)
	}
	if got := p.Problems(5*time.Second, 1000); len(got) != 1 || got[0] != "ran no input: after 9s go test was still gathering baseline coverage (0/24)" {
		t.Errorf("problems %q", got)
	}
}

// The tree's targets are found; testdata (this command's fake targets)
// is left out.
func TestFindTargets(t *testing.T) {
	root := filepath.Join("..", "..")
	targets, err := FindTargets([]string{filepath.Join(root, "internal"), filepath.Join(root, "cmd")})
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tg := range targets {
		names[tg.Name] = true
		if strings.Contains(tg.Dir, "testdata") {
			t.Errorf("%s is under testdata", tg)
		}
	}
	for _, want := range []string{"FuzzParseScenario", "FuzzParseConfig", "FuzzDecodeRequest"} {
		if !names[want] {
			t.Errorf("%s not found in %v", want, targets)
		}
	}
	fake, err := FindTargets([]string{"testdata/fake"})
	if err != nil {
		t.Fatal(err)
	}
	if len(fake) != 3 || fake[0].Name != "FuzzFine" || fake[1].Name != "FuzzSlow" || fake[2].Name != "FuzzStalls" {
		t.Errorf("fake targets %v", fake)
	}
}

// The real thing: go test -fuzz on targets that stall, run too few inputs,
// or behave; RunAll fails naming the first two and passes the third.
func TestRunAllCatchesStallsAndSlowTargets(t *testing.T) {
	if testing.Short() {
		t.Skip("fuzzes three targets for 10 s each")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command: ", err)
	}
	targets, err := FindTargets([]string{"testdata/fake"})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	o := Options{Go: gobin, FuzzTime: "10s", MinimizeTime: "0s", MinExecs: 1000, Stall: 5 * time.Second, Grace: 3 * time.Minute}
	err = RunAll(context.Background(), targets, o, &out)
	t.Log(out.String())
	if err == nil {
		t.Fatal("RunAll passed")
	}
	msg := err.Error()
	for _, want := range []string{
		"FuzzStalls (./testdata/fake): ran no input for",
		"FuzzSlow (./testdata/fake): ran ",
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error does not contain %q:\n%s", want, msg)
		}
	}
	if strings.Contains(msg, "FuzzSlow (./testdata/fake): ran no input") {
		t.Errorf("FuzzSlow made progress all along, but was reported stalled:\n%s", msg)
	}
	if strings.Contains(msg, "FuzzFine") {
		t.Errorf("FuzzFine failed:\n%s", msg)
	}
}
