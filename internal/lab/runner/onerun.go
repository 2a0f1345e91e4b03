package runner

import (
	"context"
	"fmt"
	"os"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
)

// variantRun holds what one run of a variant needs while it goes.
type variantRun struct {
	s      *scenario.Scenario
	v      *scenario.Variant
	w      *world.World
	o      Options
	dir    string
	t0     time.Duration
	meters []*traffic.Meter
	upload bool

	mu     sync.Mutex
	events []report.EventRecord
	errs   []string
	bulk   *traffic.BulkResult
	flows  []traffic.FlowResult
	// competitors: single-path TCP beside the measured traffic.
	competitors []competitorResult
}

// configError is a mistake that every run would repeat (the variant
// cannot be planned): it stops the whole run instead of failing one.
type configError struct{ error }

func (e configError) Unwrap() error { return e.error }

// runOnce runs the variant once in a fresh world and writes its files to
// dir. What goes wrong while the traffic runs (a generator's error, the
// traffic not finishing, an event that could not be applied, a daemon
// that died) is in the summary's Errors; an error return means the run
// did not get as far as its traffic (or ctx ended).
func runOnce(ctx context.Context, s *scenario.Scenario, v *scenario.Variant, o Options, dir string) (*report.Summary, error) {
	plan, err := world.NewPlan(o.Name, s, v)
	if err != nil {
		return nil, configError{err}
	}
	plan.Round = o.round
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, configError{err}
	}
	w, err := world.Up(ctx, plan, world.Options{Binary: o.Binary})
	if err != nil {
		return nil, err
	}
	// The world goes in every outcome, Ctrl-C included.
	defer w.Down()
	r := &variantRun{s: s, v: v, w: w, o: o, dir: dir, upload: true}
	for _, t := range s.Traffic {
		if t.Kind != scenario.UDPFlood && t.Measured(s) {
			r.upload = t.Upload
			break
		}
	}
	stopDaemons, err := r.startDaemons(ctx)
	if err != nil {
		return nil, err
	}
	stopMptcpd, err := r.startMptcpd(ctx)
	if err != nil {
		stopDaemons()
		return nil, err
	}
	defer stopMptcpd()
	rec, err := recorder.New(plan.Host(plan.ClientRole()).NetNS, plan.Host(plan.ServerRole()).NetNS)
	if err != nil {
		stopDaemons()
		return nil, err
	}
	defer rec.Close()
	if _, err := world.Control(w.Dir, world.Request{Op: "origin"}); err != nil {
		stopDaemons()
		return nil, err
	}
	countersBefore := r.readCounters()
	r.t0 = traffic.Now()

	var wg sync.WaitGroup
	tctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for i, t := range s.Traffic {
		wg.Add(1)
		go func(i int, t scenario.Traffic) {
			defer wg.Done()
			if err := r.runTraffic(tctx, i, t); err != nil && tctx.Err() == nil {
				r.fail(fmt.Sprintf("traffic %d (%s): %v", i+1, t.Kind, err))
			}
		}(i, t)
	}
	events := append(append([]scenario.Event(nil), s.Events...), v.Events...)
	sort.SliceStable(events, func(i, j int) bool { return events[i].At < events[j].At })
	go r.runEvents(tctx, events)

	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	limit := s.Duration()
	timeout := 10 * time.Minute
	if limit > 0 {
		timeout = limit + max(limit, 30*time.Second)
	}
	tick := time.NewTicker(o.Interval)
	defer tick.Stop()
	nextProgress := time.Second
	var sampleErr error
loop:
	for {
		select {
		case <-done:
			break loop
		case <-ctx.Done():
			cancel()
			<-done
			stopDaemons()
			return nil, ctx.Err()
		case <-tick.C:
			t := traffic.Now() - r.t0
			smp, err := rec.Take(t, r.appBytes())
			if err != nil && sampleErr == nil {
				sampleErr = err
				r.fail("recorder: " + err.Error())
			}
			if t >= nextProgress {
				r.progress(rec.Samples, smp, limit)
				nextProgress += time.Second
			}
			if t > timeout {
				planned := ""
				if limit > 0 {
					planned = fmt.Sprintf(" (planned: %v)", limit)
				}
				r.fail(fmt.Sprintf("traffic did not finish within %v%s; stopped", timeout, planned))
				cancel()
			}
		}
	}
	rec.Take(traffic.Now()-r.t0, r.appBytes())
	daemonInfo := stopDaemons()
	stopMptcpd()
	emu, _ := world.Control(w.Dir, world.Request{Op: "stats"})
	samples := r.withoutCompetitors(rec.Samples)
	sum := r.summarize(samples)
	if daemonInfo != nil {
		sum.Daemon = daemonInfo // lossMetrics reads the daemons' actions
	}
	if emu != nil {
		sum.Emulator = emu.Links
		r.recoveries(sum, emu.Links, samples)
		r.linkShares(sum, emu.Links)
	}
	r.countersSince(sum, countersBefore)
	r.floodMetrics(sum, samples)
	r.lossMetrics(sum, samples)
	r.periodShares(sum, samples) // shares.go
	return sum, r.writeFiles(sum, samples)
}

// fail records a problem of the run: it goes into the summary's errors,
// and a run with errors does not count (failure.go).
func (r *variantRun) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, msg)
}

func (r *variantRun) progress(samples []recorder.Sample, last recorder.Sample, limit time.Duration) {
	// Goodput over the last second.
	i := len(samples) - 1
	for i > 0 && last.T-samples[i].T < time.Second {
		i--
	}
	dt := (last.T - samples[i].T).Seconds()
	gp := 0.0
	if dt > 0 {
		gp = float64(last.AppBytes-samples[i].AppBytes) * 8 / 1e6 / dt
	}
	of := ""
	if limit > 0 {
		of = fmt.Sprintf("/%.0fs", limit.Seconds())
	}
	fmt.Fprintf(r.o.Progress, "      %s t=%4.1fs%s  goodput %7.1f Mbit/s  received %s\n", r.v.Name, last.T.Seconds(), of, gp, mib(last.AppBytes))
}

func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
