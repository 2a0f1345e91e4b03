package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"mpsteer/internal/lab/check"
)

func init() { extraLabCommands = append(extraLabCommands, labCheckCmd) }

// runCheck runs the measurements (a variable so that tests can stand in for
// the 55 s check).
var runCheck = check.Run

func labCheckCmd() *cobra.Command {
	var asJSON, quick bool
	c := &cobra.Command{
		Use:   "check",
		Short: "Measure the link emulator against its targets (delay, rate, loss, outage, two fast paths)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, cancel := signalContext()
			defer cancel()
			rep, err := runCheck(ctx, check.Options{Progress: os.Stderr, Quick: quick})
			if err != nil {
				return err
			}
			if asJSON {
				if err := printJSON(rep); err != nil {
					return err
				}
			} else {
				printCheck(rep)
			}
			return checkVerdict(rep)
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print the measurements as JSON")
	c.Flags().BoolVar(&quick, "quick", false, "fewer settings and shorter runs")
	return c
}

// checkVerdict is the outcome of a finished check: nil when every target
// was met, else one line naming the targets missed (the command then exits
// non-zero, after printing the report).
func checkVerdict(r *check.Report) error {
	missed := r.Missed()
	switch {
	case len(missed) > 0:
		return fmt.Errorf("lab check: %d target(s) missed: %s", len(missed), strings.Join(missed, "; "))
	case !r.Pass:
		return errors.New("lab check: not every target was met")
	}
	return nil
}

func passMark(ok bool) string {
	if ok {
		return "ok"
	}
	return "MISSED"
}

func printCheck(r *check.Report) {
	fmt.Printf("baseline RTT (no delay): %.3f ms\n", r.BaselineMs)
	fmt.Println("delay        median RTT   p99 RTT     median excess  p99 excess   target ±0.5 ms / ≤1 ms")
	for _, x := range r.RTT {
		fmt.Printf("%7.1f ms  %9.3f ms %9.3f ms  %+9.3f ms  %+9.3f ms   %s\n", x.DelayMs, x.MedianMs, x.P99Ms, x.MedianExcessMs, x.P99ExcessMs, passMark(x.Pass))
	}
	fmt.Println("rate          expected      measured     error    target ±5%")
	for _, g := range r.Goodput {
		fmt.Printf("%7.0f mbit  %8.2f Mbit/s %8.2f Mbit/s %+6.2f%%   %s\n", g.RateMbit, g.ExpectedMbit, g.MeasuredMbit, g.ErrorPct, passMark(g.Pass))
	}
	for i, g := range r.Concurrent {
		fmt.Printf("path %d of 2 at once, %.0f mbit: %8.2f Mbit/s (%+.2f%%)   %s\n", i+1, g.RateMbit, g.MeasuredMbit, g.ErrorPct, passMark(g.Pass))
	}
	for _, l := range r.Loss {
		fmt.Printf("loss %g%%: %d of %d lost = %.3f%% (99%% interval %.3f%%–%.3f%%)   %s\n", l.ConfiguredPct, l.Lost, l.Sent, l.MeasuredPct, l.Interval99Pct[0], l.Interval99Pct[1], passMark(l.Pass))
	}
	o := r.Outage
	fmt.Printf("outage %.0f s measured as %.4f s (%+.2f ms, probes every %.0f ms)   %s\n", o.ConfiguredS, o.MeasuredS, o.ErrorMs, o.ProbeMs, passMark(o.Pass))
	fmt.Printf("all targets met: %v (took %.0f s)\n", r.Pass, r.TookS)
}
