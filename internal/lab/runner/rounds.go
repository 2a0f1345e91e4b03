package runner

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"mpsteer/internal/lab/results"
)

// Repetition: N rounds; in each, every selected variant runs once, in the
// scenario's order (A B C A B C …), each in a fresh world, so that slow
// drift of the machine touches every variant alike and run r of one
// variant can be paired with run r of another. A run that fails is run
// once more right after, in the same round; if that fails too the round
// has no value for that variant.

// attemptFunc runs one attempt of a variant in a round. An error stops
// every round (ctx ended, or a mistake every run would repeat); a run
// that merely failed is a Run with Failed set.
type attemptFunc func(ctx context.Context, round, attempt int, variant string) (results.Run, error)

// errBroken reports the variants that failed both attempts of the first
// round: a setup that never works, not noise. They run no further rounds;
// the others go on.
type errBroken struct {
	variants, reasons []string
}

func (e errBroken) Error() string {
	var parts []string
	for i, v := range e.variants {
		parts = append(parts, fmt.Sprintf("variant %s failed twice in the first round (%s)", v, e.reasons[i]))
	}
	return strings.Join(parts, "; ") + "; it ran no further rounds"
}

// runRounds runs n rounds of the variants in order, calling after with
// every attempt so far when each is done. It returns every attempt per
// variant in the order run, also when it stops early.
func runRounds(ctx context.Context, n int, order []string, attempt attemptFunc, after func(map[string][]results.Run)) (map[string][]results.Run, error) {
	runs := map[string][]results.Run{}
	var broken errBroken
	dropped := map[string]bool{}
	for round := 1; round <= n; round++ {
		for _, v := range order {
			if dropped[v] {
				continue
			}
			for try := 1; try <= 2; try++ {
				if err := ctx.Err(); err != nil {
					return runs, err
				}
				run, err := attempt(ctx, round, try, v)
				if err != nil {
					return runs, err
				}
				runs[v] = append(runs[v], run)
				after(runs)
				if !run.Failed {
					break
				}
				if try == 2 && round == 1 {
					dropped[v] = true
					broken.variants, broken.reasons = append(broken.variants, v), append(broken.reasons, run.Reason)
				}
			}
		}
	}
	if len(broken.variants) > 0 {
		return runs, broken
	}
	return runs, nil
}

// runDir is where an attempt's files go, relative to the output
// directory: <variant>/run-<round>, and run-<round>b for the re-run.
func runDir(variant string, round, attempt int) string {
	d := fmt.Sprintf("%s/run-%d", variant, round)
	if attempt > 1 {
		d += "b"
	}
	return d
}

// progress tells, on stderr, where a long run is and how long it has to go.
type progress struct {
	w      io.Writer
	name   string
	rounds int
	order  []string
	start  time.Time
	// took is how long each variant's attempts took so far.
	took map[string][]time.Duration
	// finished counts each variant's rounds done (a value, or two
	// failures); done all of them.
	finished map[string]int
	done     int
	now      func() time.Time
}

func newProgress(w io.Writer, name string, rounds int, order []string) *progress {
	return &progress{w: w, name: name, rounds: rounds, order: order, start: time.Now(), took: map[string][]time.Duration{}, finished: map[string]int{}, now: time.Now}
}

// begin announces an attempt.
func (p *progress) begin(round, attempt int, variant, what string) {
	again := ""
	if attempt > 1 {
		again = ", run again"
	}
	elapsed := p.now().Sub(p.start)
	fmt.Fprintf(p.w, "[round %d/%d, run %d/%d%s] %s: variant %s (%s); %s elapsed%s\n", round, p.rounds, p.done+1, p.rounds*len(p.order),
		again, p.name, variant, what, elapsed.Round(time.Second), p.eta())
}

// end records an attempt's time and says how it went.
func (p *progress) end(run results.Run, variant string, took time.Duration) {
	p.took[variant] = append(p.took[variant], took)
	if !run.Failed || run.Attempt > 1 {
		p.done++
		p.finished[variant]++
	}
	switch {
	case run.Failed && run.Attempt == 1:
		fmt.Fprintf(p.w, "      %s FAILED (%s): %s; running it once more\n", variant, run.Dir, run.Reason)
	case run.Failed && run.Round == 1:
		fmt.Fprintf(p.w, "      %s FAILED again (%s): %s; it runs no further rounds\n", variant, run.Dir, run.Reason)
		// What it would have run is not to come.
		p.done += p.rounds - 1
		p.finished[variant] = p.rounds
	case run.Failed:
		fmt.Fprintf(p.w, "      %s FAILED again (%s): %s; round %d has no value for it\n", variant, run.Dir, run.Reason, run.Round)
	case run.BestPath != "":
		fmt.Fprintf(p.w, "      %s: goodput %.1f Mbit/s over %s, the best of %s\n", variant, run.Summary.GoodputMbit, run.BestPath, bestOf(run.BestOf))
	default:
		fmt.Fprintf(p.w, "      %s: goodput %.1f Mbit/s, %d retransmits\n", variant, run.Summary.GoodputMbit, run.Summary.Retransmits)
	}
}

func bestOf(by map[string]float64) string {
	var parts []string
	for p, v := range by {
		parts = append(parts, fmt.Sprintf("%s %.4g", p, v))
	}
	return strings.Join(parts, ", ")
}

// eta is ", about D left": what the runs still to come take at each
// variant's mean so far (the mean of all runs for a variant not yet run).
func (p *progress) eta() string {
	var all []time.Duration
	for _, ds := range p.took {
		all = append(all, ds...)
	}
	if len(all) == 0 {
		return ""
	}
	var sum time.Duration
	for _, v := range p.order {
		mean := meanDuration(all)
		if ds := p.took[v]; len(ds) > 0 {
			mean = meanDuration(ds)
		}
		sum += time.Duration(p.rounds-p.finished[v]) * mean
	}
	if sum <= 0 {
		return ""
	}
	return fmt.Sprintf(", about %s left", sum.Round(time.Second))
}

func meanDuration(ds []time.Duration) time.Duration {
	var s time.Duration
	for _, d := range ds {
		s += d
	}
	return s / time.Duration(len(ds))
}
