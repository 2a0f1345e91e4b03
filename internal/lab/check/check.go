// Package check measures the lab's link emulator against its targets:
// delay accuracy, rate accuracy, random loss, outage timing, and two fast
// paths at once. It is a benchmark (`mpsteer lab check`), not a test: the
// numbers depend on how busy the machine is.
package check

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/stats"
	"mpsteer/internal/units"
)

// Options tune the check.
type Options struct {
	Binary   string
	Progress io.Writer
	Quick    bool // fewer delays and rates, shorter transfers (for tests)
}

// RTTResult is one delay setting.
type RTTResult struct {
	DelayMs        float64 `json:"delay_ms"`
	Probes         int     `json:"probes"`
	MedianMs       float64 `json:"median_rtt_ms"`
	P99Ms          float64 `json:"p99_rtt_ms"`
	MedianExcessMs float64 `json:"median_excess_ms"` // median − 2·delay − baseline median
	P99ExcessMs    float64 `json:"p99_excess_ms"`    // p99 − 2·delay − baseline median
	Pass           bool    `json:"pass"`
}

// GoodputResult is one rate setting.
type GoodputResult struct {
	RateMbit     float64 `json:"rate_mbit"`
	ExpectedMbit float64 `json:"expected_mbit"` // rate × 1448/1500
	MeasuredMbit float64 `json:"measured_mbit"`
	ErrorPct     float64 `json:"error_pct"`
	Pass         bool    `json:"pass"`
}

// LossResult is the random-loss check.
type LossResult struct {
	ConfiguredPct float64    `json:"configured_pct"`
	Sent          int        `json:"sent"`
	Lost          int        `json:"lost"`
	MeasuredPct   float64    `json:"measured_pct"`
	Interval99Pct [2]float64 `json:"interval_99_pct"`
	Pass          bool       `json:"pass"`
}

// OutageResult is the outage timing check.
type OutageResult struct {
	ConfiguredS float64 `json:"configured_s"`
	MeasuredS   float64 `json:"measured_s"`
	ErrorMs     float64 `json:"error_ms"`
	ProbeMs     float64 `json:"probe_interval_ms"`
	Pass        bool    `json:"pass"`
}

// Report is the whole check.
type Report struct {
	RTT        []RTTResult     `json:"rtt"`
	BaselineMs float64         `json:"baseline_rtt_ms"`
	Goodput    []GoodputResult `json:"goodput"`
	Loss       []LossResult    `json:"loss"`
	Outage     OutageResult    `json:"outage"`
	Concurrent []GoodputResult `json:"concurrent_two_paths"`
	Pass       bool            `json:"pass"`
	TookS      float64         `json:"took_s"`
}

type checker struct {
	o    Options
	name string
	dir  string
}

// Run performs every check.
func Run(ctx context.Context, o Options) (*Report, error) {
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	dir, err := os.MkdirTemp("", "mpsteer-check")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	c := &checker{o: o, name: fmt.Sprintf("check-%d", os.Getpid()), dir: dir}
	start := time.Now()
	rep := &Report{}
	if err := c.rtt(ctx, rep); err != nil {
		return rep, fmt.Errorf("rtt check: %w", err)
	}
	if err := c.goodput(ctx, rep); err != nil {
		return rep, fmt.Errorf("goodput check: %w", err)
	}
	if err := c.loss(ctx, rep); err != nil {
		return rep, fmt.Errorf("loss check: %w", err)
	}
	if err := c.outage(ctx, rep); err != nil {
		return rep, fmt.Errorf("outage check: %w", err)
	}
	if err := c.concurrent(ctx, rep); err != nil {
		return rep, fmt.Errorf("concurrency check: %w", err)
	}
	rep.Pass = len(rep.Missed()) == 0
	rep.TookS = time.Since(start).Seconds()
	return rep, nil
}

// Missed names every target the report's measurements missed, in the order
// they were measured; none means every target was met.
func (r *Report) Missed() []string {
	var out []string
	for _, x := range r.RTT {
		if !x.Pass {
			out = append(out, fmt.Sprintf("RTT at %g ms delay", x.DelayMs))
		}
	}
	for _, g := range r.Goodput {
		if !g.Pass {
			out = append(out, fmt.Sprintf("rate %g mbit", g.RateMbit))
		}
	}
	for _, l := range r.Loss {
		if !l.Pass {
			out = append(out, fmt.Sprintf("loss %g%%", l.ConfiguredPct))
		}
	}
	if !r.Outage.Pass {
		out = append(out, fmt.Sprintf("outage %g s", r.Outage.ConfiguredS))
	}
	for i, g := range r.Concurrent {
		if !g.Pass {
			out = append(out, fmt.Sprintf("path %d of 2 at once at %g mbit", i+1, g.RateMbit))
		}
	}
	return out
}

// world builds a one-variant world from scenario text.
func (c *checker) world(ctx context.Context, src string, variant string) (*world.World, error) {
	file := filepath.Join(c.dir, "check.yaml")
	s, err := scenario.Parse(file, []byte(src))
	if err != nil {
		return nil, err
	}
	plan, err := world.NewPlan(c.name, s, s.Variant(variant))
	if err != nil {
		return nil, err
	}
	return world.Up(ctx, plan, world.Options{Binary: c.o.Binary})
}

func ms(d time.Duration) float64 { return float64(d) / 1e6 }

func (c *checker) probe(ctx context.Context, w *world.World, count int, interval time.Duration) ([]traffic.Probe, error) {
	p := w.Paths[0]
	echo, err := traffic.StartEcho(w.Host(world.Server).NetNS, netip.AddrPortFrom(p.Server.Addr, 7))
	if err != nil {
		return nil, err
	}
	defer echo.Close()
	run := &traffic.ProbeRun{NS: w.Host(world.Client).NetNS, Src: p.Client.Addr, Dst: netip.AddrPortFrom(p.Server.Addr, 7),
		Count: count, Interval: interval, Size: 64, Grace: 500 * time.Millisecond}
	return run.Run(ctx)
}

func (c *checker) setPath(w *world.World, dir scenario.Dir, patch scenario.Patch) error {
	_, err := world.Control(w.Dir, world.Request{Op: "set", Link: w.Paths[0].Link, Dir: dir, Patch: &patch})
	return err
}

func (c *checker) rtt(ctx context.Context, rep *Report) error {
	delays := []time.Duration{0, time.Millisecond, 10 * time.Millisecond, 50 * time.Millisecond, 200 * time.Millisecond}
	count := 2000
	if c.o.Quick {
		delays, count = []time.Duration{0, time.Millisecond, 20 * time.Millisecond}, 300
	}
	w, err := c.world(ctx, "paths: [{name: p}]\n", "tcp")
	if err != nil {
		return err
	}
	defer w.Down()
	var baseline time.Duration
	for _, d := range delays {
		fmt.Fprintf(c.o.Progress, "check: RTT with %v one-way delay (%d probes every 1ms)\n", d, count)
		dd := d
		if err := c.setPath(w, scenario.DirBoth, scenario.Patch{Delay: &dd}); err != nil {
			return err
		}
		probes, err := c.probe(ctx, w, count, time.Millisecond)
		if err != nil {
			return err
		}
		rtts := traffic.RTTs(probes)
		if len(rtts) == 0 {
			return traffic.ErrNoAnswers
		}
		q := stats.Durations(rtts, 0.5, 0.99)
		med, p99 := q[0], q[1]
		if d == 0 {
			baseline = med
			rep.BaselineMs = ms(med)
			continue
		}
		r := RTTResult{DelayMs: ms(d), Probes: len(rtts), MedianMs: ms(med), P99Ms: ms(p99),
			MedianExcessMs: ms(med - 2*d - baseline), P99ExcessMs: ms(p99 - 2*d - baseline)}
		r.Pass = math.Abs(r.MedianExcessMs) <= 0.5 && r.P99ExcessMs <= 1.0
		rep.RTT = append(rep.RTT, r)
	}
	return nil
}

// bulkGoodput runs a TCP upload over path i and returns the goodput after
// warm-up.
func bulkGoodput(ctx context.Context, w *world.World, i int, d, warmup time.Duration) (float64, error) {
	p := w.Paths[i]
	b := &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
		Server: netip.AddrPortFrom(p.Server.Addr, uint16(5201+i)), Proto: traffic.TCP, Upload: true, Duration: d}
	var at0 int64
	var t0 time.Duration
	go func() {
		time.Sleep(warmup)
		at0, t0 = b.Meter.Bytes(), traffic.Now()
	}()
	res, err := b.Run(ctx)
	if err != nil {
		return 0, err
	}
	span := (res.LastByte - t0).Seconds()
	if span <= 0 {
		return 0, fmt.Errorf("the transfer ended during warm-up")
	}
	return float64(res.Bytes-at0) * 8 / 1e6 / span, nil
}

func expected(rate units.Rate) float64 { return rate.Mbit() * 1448 / 1500 }

func (c *checker) goodput(ctx context.Context, rep *Report) error {
	rates := []float64{4, 100, 400}
	if c.o.Quick {
		rates = []float64{20}
	}
	for _, r := range rates {
		// 2 ms one-way; buffers far above 2×BDP (BDP at 400mbit is 200 KB).
		dur, warm := 6*time.Second, 2*time.Second
		if r < 10 {
			dur, warm = 12*time.Second, 4*time.Second
		}
		if c.o.Quick {
			dur, warm = 3*time.Second, time.Second
		}
		fmt.Fprintf(c.o.Progress, "check: TCP goodput at %gmbit for %v\n", r, dur)
		src := fmt.Sprintf("hosts: {client: {rmem: 32MiB, wmem: 32MiB}, server: {rmem: 32MiB, wmem: 32MiB}}\npaths: [{name: p, rate: %gmbit, delay: 2ms}]\n", r)
		w, err := c.world(ctx, src, "tcp")
		if err != nil {
			return err
		}
		got, err := bulkGoodput(ctx, w, 0, dur, warm)
		w.Down()
		if err != nil {
			return err
		}
		rep.Goodput = append(rep.Goodput, goodputResult(units.Rate(r*1e6), got))
	}
	return nil
}

func goodputResult(rate units.Rate, got float64) GoodputResult {
	exp := expected(rate)
	g := GoodputResult{RateMbit: rate.Mbit(), ExpectedMbit: exp, MeasuredMbit: got, ErrorPct: (got - exp) / exp * 100}
	g.Pass = math.Abs(g.ErrorPct) <= 5
	return g
}

func (c *checker) loss(ctx context.Context, rep *Report) error {
	n := 20000
	if c.o.Quick {
		n = 5000
	}
	for _, pct := range []float64{1, 10} {
		fmt.Fprintf(c.o.Progress, "check: %g%% random loss, %d probes\n", pct, n)
		// Loss on the way out only, so that each probe is one trial.
		src := fmt.Sprintf("paths: [{name: p, up: {loss: %g%%}}]\n", pct)
		w, err := c.world(ctx, src, "tcp")
		if err != nil {
			return err
		}
		probes, err := c.probe(ctx, w, n, 100*time.Microsecond)
		w.Down()
		if err != nil {
			return err
		}
		lost := n - len(traffic.RTTs(probes))
		p := pct / 100
		half := 2.576 * math.Sqrt(p*(1-p)/float64(n))
		l := LossResult{ConfiguredPct: pct, Sent: n, Lost: lost, MeasuredPct: float64(lost) / float64(n) * 100,
			Interval99Pct: [2]float64{(p - half) * 100, (p + half) * 100}}
		l.Pass = l.MeasuredPct >= l.Interval99Pct[0] && l.MeasuredPct <= l.Interval99Pct[1]
		rep.Loss = append(rep.Loss, l)
	}
	return nil
}

func (c *checker) outage(ctx context.Context, rep *Report) error {
	const interval = time.Millisecond
	outage := 5 * time.Second
	if c.o.Quick {
		outage = time.Second
	}
	fmt.Fprintf(c.o.Progress, "check: %v outage measured by 1ms probes\n", outage)
	src := fmt.Sprintf("paths: [{name: p, up: {outage: {at: 500ms, for: %s}}}]\n", outage)
	w, err := c.world(ctx, src, "tcp")
	if err != nil {
		return err
	}
	defer w.Down()
	if _, err := world.Control(w.Dir, world.Request{Op: "origin"}); err != nil {
		return err
	}
	count := int((outage + time.Second) / interval)
	probes, err := c.probe(ctx, w, count, interval)
	if err != nil {
		return err
	}
	// The longest run of lost probes, measured from the last answered probe
	// before it to the first answered after it.
	best := 0.0
	lastOK := -1
	for i, p := range probes {
		if p.RTT == 0 {
			continue
		}
		if lastOK >= 0 && i-lastOK > 1 {
			gap := ms(p.Sent-probes[lastOK].Sent) - ms(interval)
			best = math.Max(best, gap)
		}
		lastOK = i
	}
	r := OutageResult{ConfiguredS: outage.Seconds(), MeasuredS: best / 1000, ProbeMs: ms(interval)}
	r.ErrorMs = best - ms(outage)
	r.Pass = math.Abs(r.ErrorMs) <= 2
	rep.Outage = r
	return nil
}

func (c *checker) concurrent(ctx context.Context, rep *Report) error {
	rate, dur, warm := 400.0, 6*time.Second, 2*time.Second
	if c.o.Quick {
		rate, dur, warm = 50, 3*time.Second, time.Second
	}
	fmt.Fprintf(c.o.Progress, "check: two paths at %gmbit at once\n", rate)
	src := fmt.Sprintf(`hosts: {client: {rmem: 32MiB, wmem: 32MiB}, server: {rmem: 32MiB, wmem: 32MiB}}
paths:
  - {name: p, rate: %[1]gmbit, delay: 2ms}
  - {name: q, rate: %[1]gmbit, delay: 2ms}
`, rate)
	file := filepath.Join(c.dir, "check.yaml")
	s, err := scenario.Parse(file, []byte(src))
	if err != nil {
		return err
	}
	// A tcp variant builds one path; build both by hand-picking them.
	v := &scenario.Variant{Name: "both", Kind: scenario.KindTCP, Paths: []string{"p", "q"}}
	plan, err := world.NewPlan(c.name, s, v)
	if err != nil {
		return err
	}
	w, err := world.Up(ctx, plan, world.Options{Binary: c.o.Binary})
	if err != nil {
		return err
	}
	defer w.Down()
	var wg sync.WaitGroup
	got := make([]float64, 2)
	errs := make([]error, 2)
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			got[i], errs[i] = bulkGoodput(ctx, w, i, dur, warm)
		}(i)
	}
	wg.Wait()
	for i := 0; i < 2; i++ {
		if errs[i] != nil {
			return errs[i]
		}
		rep.Concurrent = append(rep.Concurrent, goodputResult(units.Rate(rate*1e6), got[i]))
	}
	return nil
}
