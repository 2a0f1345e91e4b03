// Command fuzzrun runs every Go fuzz target of the tree for a time each
// (`make fuzz`) and fails, naming the target, when one stopped making
// progress for longer than -stall or ran fewer than -min-execs inputs.
// go test -fuzz passes such a run: FuzzParseScenario once ran a few
// hundred inputs and then none for the rest of the run, and passed.
//
// Progress is read from go test's log, a line every 3 s:
//
//	fuzz: elapsed: 6s, execs: 680 (0/sec), new interesting: 1 (total: 42)
//
// A worker reports the inputs it ran only when it hands back its batch, so
// a worker stuck in one input (or in minimizing one) shows as execs that
// stop growing.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Target is one fuzz function and the package directory it is in.
type Target struct {
	Dir  string // relative, e.g. internal/lab/scenario
	Name string // e.g. FuzzParseScenario
}

func (t Target) String() string { return fmt.Sprintf("%s (./%s)", t.Name, t.Dir) }

var fuzzFunc = regexp.MustCompile(`^func (Fuzz\w*)\(\w+ \*testing\.F\)`)

// FindTargets lists the fuzz targets in the _test.go files under roots,
// leaving out testdata and hidden directories as the go command does.
func FindTargets(roots []string) ([]Target, error) {
	var out []Target
	for _, root := range roots {
		err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				name := d.Name()
				if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
					return filepath.SkipDir
				}
				return nil
			}
			if !strings.HasSuffix(path, "_test.go") {
				return nil
			}
			f, err := os.Open(path)
			if err != nil {
				return err
			}
			defer f.Close()
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m := fuzzFunc.FindStringSubmatch(sc.Text()); m != nil {
					out = append(out, Target{Dir: filepath.Dir(path), Name: m[1]})
				}
			}
			return sc.Err()
		})
		if err != nil {
			return nil, err
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Dir != out[j].Dir {
			return out[i].Dir < out[j].Dir
		}
		return out[i].Name < out[j].Name
	})
	return out, nil
}

var (
	progressLine = regexp.MustCompile(`^fuzz: elapsed: (\S+), execs: (\d+) \(`)
	// The line that ends the seed corpus (with coverage: "gathering
	// baseline coverage", without: "testing seed corpus").
	startLine = regexp.MustCompile(`^fuzz: elapsed: (\S+), .*now fuzzing with`)
	seedLine  = regexp.MustCompile(`^fuzz: elapsed: (\S+), (gathering baseline coverage|testing seed corpus): (\d+/\d+)`)
	// The target's failure, the lines indented under it its messages.
	failLine = regexp.MustCompile(`^--- FAIL: Fuzz\w* \((\S+)\)$`)
)

// goDeadlineRace is the message Go's fuzz coordinator (before Go 1.27)
// fails a target with when its -fuzztime deadline reaches the workers
// before its own cancel does (go.dev/issue/75804): the run ended on time
// and no input failed.
const goDeadlineRace = "context deadline exceeded"

// Progress follows one target's log.
type Progress struct {
	started bool
	// seeds is the last seed corpus line before fuzzing started: what go
	// test was doing, how far, and when.
	seeds []string
	// Execs is the last count of inputs run; Lines how many progress
	// lines were read.
	Execs int64
	Lines int
	// lastGrowth is when Execs last grew (or fuzzing started).
	lastGrowth time.Duration
	// Stall is the longest time Execs did not grow, from StallFrom: from
	// the last line where it grew to the last where it had not, so up to
	// one line interval (3 s) shorter than the stall itself.
	Stall, StallFrom time.Duration
	// failedAt is the time go test gave the target's failure, failure
	// the messages under it; inputWritten says go test wrote a failing
	// input to the corpus.
	failedAt     time.Duration
	inFailure    bool
	failure      []string
	inputWritten bool
}

// DeadlineRace says the target's only failure is Go's fuzz coordinator
// reporting its own -fuzztime deadline, at or after fuzzTime, with no
// failing input written: not a finding. Without a fuzz time (a count,
// which has no deadline) it never is.
func (p *Progress) DeadlineRace(fuzzTime time.Duration) bool {
	return fuzzTime > 0 && len(p.failure) == 1 && p.failure[0] == goDeadlineRace && !p.inputWritten && p.failedAt >= fuzzTime
}

// failureLine follows the lines under a target's --- FAIL line.
func (p *Progress) failureLine(s string) {
	msg := strings.TrimSpace(s)
	if strings.HasPrefix(msg, "Failing input written to") {
		p.inputWritten = true
	}
	if m := failLine.FindStringSubmatch(s); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			p.inFailure, p.failedAt = true, d
		}
		return
	}
	switch {
	case !p.inFailure || msg == "":
	case !strings.HasPrefix(s, " "):
		p.inFailure = false
	default:
		p.failure = append(p.failure, msg)
	}
}

// Line reads one line of go test's output.
func (p *Progress) Line(s string) {
	p.failureLine(s)
	if m := startLine.FindStringSubmatch(s); m != nil {
		if d, err := time.ParseDuration(m[1]); err == nil {
			p.started, p.lastGrowth = true, d
		}
		return
	}
	if m := seedLine.FindStringSubmatch(s); m != nil {
		p.seeds = m[1:]
		return
	}
	m := progressLine.FindStringSubmatch(s)
	if m == nil {
		return
	}
	elapsed, err1 := time.ParseDuration(m[1])
	execs, err2 := strconv.ParseInt(m[2], 10, 64)
	if err1 != nil || err2 != nil {
		return
	}
	if !p.started {
		p.started, p.lastGrowth = true, 0
	}
	p.Lines++
	if execs > p.Execs {
		p.Execs, p.lastGrowth = execs, elapsed
		return
	}
	if d := elapsed - p.lastGrowth; d > p.Stall {
		p.Stall, p.StallFrom = d, p.lastGrowth
	}
}

// Problems says what is wrong with the run: no progress for longer than
// stall, fewer than minExecs inputs, or no progress lines at all.
func (p *Progress) Problems(stall time.Duration, minExecs int64) []string {
	var out []string
	if p.Lines == 0 {
		if p.seeds != nil {
			return []string{fmt.Sprintf("ran no input: after %s go test was still %s (%s)", p.seeds[0], p.seeds[1], p.seeds[2])}
		}
		return []string{"go test printed no fuzzing progress"}
	}
	if p.Stall > stall {
		out = append(out, fmt.Sprintf("ran no input for %v (from %v into the run to %v), more than %v", p.Stall, p.StallFrom, p.StallFrom+p.Stall, stall))
	}
	if p.Execs < minExecs {
		out = append(out, fmt.Sprintf("ran %d inputs, fewer than %d", p.Execs, minExecs))
	}
	return out
}

// Options are a run's settings.
type Options struct {
	Go       string // the go command
	FuzzTime string // as go test's -fuzztime
	// MinimizeTime is go test's -fuzzminimizetime. A worker minimizing a
	// new input reports nothing until it is done, which reads as a stall,
	// and the time is taken from fuzzing: 0s turns it off.
	MinimizeTime string
	MinExecs     int64
	Stall        time.Duration
	// Grace is how long after FuzzTime a target may take to build and
	// stop before it is killed.
	Grace time.Duration
}

// Result is one target's run.
type Result struct {
	Target   Target
	Progress Progress
	Problems []string
	// Notes are what the summary says of a target that passed.
	Notes []string
}

// Run fuzzes one target, copying go test's output to out.
func Run(ctx context.Context, t Target, o Options, out io.Writer) Result {
	res := Result{Target: t}
	fuzzTime, _ := time.ParseDuration(o.FuzzTime)
	limit := o.Grace + fuzzTime
	ctx, cancel := context.WithTimeout(ctx, limit)
	defer cancel()
	args := []string{"test", "-run", "^$", "-fuzz", "^" + t.Name + "$", "-fuzztime", o.FuzzTime}
	if o.MinimizeTime != "" {
		args = append(args, "-fuzzminimizetime", o.MinimizeTime)
	}
	cmd := exec.CommandContext(ctx, o.Go, append(args, "./"+filepath.ToSlash(t.Dir))...)
	// go test, the test binary and its fuzz workers are one process group,
	// stopped together.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	if err := cmd.Start(); err != nil {
		res.Problems = []string{fmt.Sprintf("go test did not start: %v", err)}
		return res
	}
	done := make(chan struct{})
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			fmt.Fprintln(out, sc.Text())
			res.Progress.Line(sc.Text())
		}
		io.Copy(io.Discard, pr)
		close(done)
	}()
	err := cmd.Wait()
	pw.Close()
	<-done
	res.Problems = res.Progress.Problems(o.Stall, o.MinExecs)
	switch {
	case ctx.Err() == context.DeadlineExceeded:
		res.Problems = append(res.Problems, fmt.Sprintf("did not end within %v of its fuzz time; killed", o.Grace))
	case err != nil && res.Progress.DeadlineRace(fuzzTime):
		res.Notes = append(res.Notes, fmt.Sprintf("go test failed with Go's own %q at the end of the fuzz time, no input failed (go.dev/issue/75804, fixed in Go 1.27): not counted", goDeadlineRace))
	case err != nil:
		res.Problems = append(res.Problems, fmt.Sprintf("go test failed: %v", err))
	}
	return res
}

// RunAll fuzzes every target in turn and writes a summary; the error names
// every target with a problem.
func RunAll(ctx context.Context, targets []Target, o Options, out io.Writer) error {
	var results []Result
	for _, t := range targets {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		fmt.Fprintf(out, "fuzz %s for %s\n", t, o.FuzzTime)
		results = append(results, Run(ctx, t, o, out))
	}
	var failed []string
	fmt.Fprintf(out, "\nfuzz summary (at least %d inputs, no stall over %v):\n", o.MinExecs, o.Stall)
	for _, r := range results {
		verdict := "ok"
		if len(r.Notes) > 0 {
			verdict = "ok: " + strings.Join(r.Notes, "; ")
		}
		if len(r.Problems) > 0 {
			verdict = "FAIL: " + strings.Join(r.Problems, "; ")
			failed = append(failed, fmt.Sprintf("%s: %s", r.Target, strings.Join(r.Problems, "; ")))
		}
		fmt.Fprintf(out, "  %-24s %-28s %10d inputs, longest stall %-5v %s\n", r.Target.Name, "./"+r.Target.Dir, r.Progress.Execs, r.Progress.Stall, verdict)
	}
	if len(failed) > 0 {
		return errors.New("fuzzing failed:\n  " + strings.Join(failed, "\n  "))
	}
	return nil
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

func main() {
	o := Options{Go: envOr("GO", "go"), Grace: 5 * time.Minute}
	flag.StringVar(&o.FuzzTime, "fuzztime", envOr("FUZZTIME", "30s"), "how long to fuzz each target (go test -fuzztime)")
	flag.StringVar(&o.MinimizeTime, "minimizetime", envOr("FUZZ_MINIMIZETIME", "0s"), "go test -fuzzminimizetime: how long to minimize each new or failing input (0s: not at all; go test's default is 60s)")
	minExecs, err := strconv.ParseInt(envOr("FUZZ_MIN_EXECS", "1000"), 10, 64)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fuzzrun: FUZZ_MIN_EXECS=%q is not a whole number\n", os.Getenv("FUZZ_MIN_EXECS"))
		os.Exit(2)
	}
	flag.Int64Var(&o.MinExecs, "min-execs", minExecs, "the fewest inputs a target must run in its time")
	flag.DurationVar(&o.Stall, "stall", 5*time.Second, "the longest time a target may run no input")
	flag.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: fuzzrun [flags] [dir ...]\n\nFuzzes every target under the directories (default: internal cmd).\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if _, err := time.ParseDuration(o.FuzzTime); err != nil {
		fmt.Fprintf(os.Stderr, "fuzzrun: -fuzztime %q is not a duration such as 30s (a count such as 1000x cannot be watched for stalls)\n", o.FuzzTime)
		os.Exit(2)
	}
	roots := flag.Args()
	if len(roots) == 0 {
		roots = []string{"internal", "cmd"}
	}
	targets, err := FindTargets(roots)
	if err != nil {
		fmt.Fprintf(os.Stderr, "fuzzrun: %v\n", err)
		os.Exit(2)
	}
	if len(targets) == 0 {
		fmt.Fprintf(os.Stderr, "fuzzrun: no fuzz targets under %s\n", strings.Join(roots, ", "))
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := RunAll(ctx, targets, o, os.Stdout); err != nil {
		fmt.Fprintf(os.Stderr, "fuzzrun: %v\n", err)
		os.Exit(1)
	}
}
