// Package runner runs the variants of a scenario, each in a fresh world,
// and writes per variant timeseries.csv, subflows.csv, summary.json and
// plots, and for the run a report.md comparing the variants.
package runner

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/pm"
	"mpsteer/internal/stats"
)

// Options tune a run.
type Options struct {
	Out      string   // output directory
	Variants []string // run only these (default: all)
	Binary   string   // mpsteer executable for the emulator and daemons
	Name     string   // lab name (default: run-<pid>)
	Progress io.Writer
	Interval time.Duration // sampling interval (default 100 ms)
}

// Result lists what a run produced.
type Result struct {
	Out       string
	Summaries []*report.Summary
	Report    string
}

// Run runs the selected variants one after another.
func Run(ctx context.Context, s *scenario.Scenario, o Options) (*Result, error) {
	if o.Interval <= 0 {
		o.Interval = 100 * time.Millisecond
	}
	if o.Name == "" {
		o.Name = fmt.Sprintf("run-%d", os.Getpid())
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.Out == "" {
		o.Out = filepath.Join("results", s.Name)
	}
	var variants []*scenario.Variant
	for _, v := range s.Variants {
		if len(o.Variants) == 0 || contains(o.Variants, v.Name) {
			variants = append(variants, v)
		}
	}
	for _, want := range o.Variants {
		if s.Variant(want) == nil {
			var names []string
			for _, v := range s.Variants {
				names = append(names, v.Name)
			}
			return nil, fmt.Errorf("scenario %s has no variant %q (variants: %s)", s.Name, want, strings.Join(names, ", "))
		}
	}
	if len(s.Traffic) == 0 {
		return nil, fmt.Errorf("%s: the scenario has no traffic to run", s.File)
	}
	if err := world.Preflight(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	res := &Result{Out: o.Out}
	for i, v := range variants {
		over := strings.Join(v.Paths, ", ")
		if s.Tenants != nil {
			over = fmt.Sprintf("VM %s to VM %s", s.Tenants.Client, s.Tenants.Server)
		}
		fmt.Fprintf(o.Progress, "[%d/%d] %s: variant %s (%s over %s)\n", i+1, len(variants), s.Name, v.Name, v.Kind, over)
		sum, err := runVariant(ctx, s, v, o)
		if err != nil {
			return res, fmt.Errorf("variant %s: %w", v.Name, err)
		}
		res.Summaries = append(res.Summaries, sum)
		fmt.Fprintf(o.Progress, "      %s: goodput %.1f Mbit/s, %d retransmits\n", v.Name, sum.GoodputMbit, sum.Retransmits)
	}
	res.Report = filepath.Join(o.Out, "report.md")
	return res, writeReport(s, res)
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// variantRun holds what one variant's run needs while it goes.
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
}

func runVariant(ctx context.Context, s *scenario.Scenario, v *scenario.Variant, o Options) (*report.Summary, error) {
	plan, err := world.NewPlan(o.Name, s, v)
	if err != nil {
		return nil, err
	}
	dir := report.VariantDir(o.Out, v.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
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
	var daemonInfo map[string]any
	rec, err := recorder.New(plan.Host(plan.ClientRole()).NetNS, plan.Host(plan.ServerRole()).NetNS)
	if err != nil {
		return nil, err
	}
	defer rec.Close()
	if _, err := world.Control(w.Dir, world.Request{Op: "origin"}); err != nil {
		return nil, err
	}
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
				r.fail(fmt.Sprintf("traffic did not finish within %v; stopped", timeout))
				cancel()
			}
		}
	}
	rec.Take(traffic.Now()-r.t0, r.appBytes())
	daemonInfo = stopDaemons()
	emu, _ := world.Control(w.Dir, world.Request{Op: "stats"})
	sum := r.summarize(rec.Samples)
	if emu != nil {
		sum.Emulator = emu.Links
		r.recoveries(sum, emu.Links, rec.Samples)
		r.linkShares(sum, emu.Links)
	}
	r.floodMetrics(sum, rec.Samples)
	if daemonInfo != nil {
		sum.Daemon = daemonInfo
	}
	return sum, r.writeFiles(sum, rec.Samples)
}

func (r *variantRun) fail(msg string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.errs = append(r.errs, msg)
}

func (r *variantRun) appBytes() int64 {
	var n int64
	for _, m := range r.meters {
		n += m.Bytes()
	}
	return n
}

func (r *variantRun) proto() traffic.Proto {
	if r.v.Kind == scenario.KindTCP {
		return traffic.TCP
	}
	return traffic.MPTCP
}

// meter registers a receive counter before its generator starts, so that
// the sampler never races with the list.
func (r *variantRun) meter(m *traffic.Meter) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.meters = append(r.meters, m)
}

func (r *variantRun) runTraffic(ctx context.Context, i int, t scenario.Traffic) error {
	clientNS := r.w.Host(r.w.ClientRole()).NetNS
	serverNS := r.w.Host(r.w.ServerRole()).NetNS
	first := r.w.Paths[0]
	serverAddr := first.Server.Addr
	// In a tenants world only the measured pair's traffic is counted:
	// other tenants' pairs are background.
	measured := t.Measured(r.s)
	if !measured {
		cv, sv := r.w.Tenants.VM(t.Pair[0]), r.w.Tenants.VM(t.Pair[1])
		if cv == nil || sv == nil {
			return fmt.Errorf("VM pair %s, %s is not in this world", t.Pair[0], t.Pair[1])
		}
		clientNS, serverNS, serverAddr = cv.NetNS, sv.NetNS, sv.Addr
	}
	meter := func(m *traffic.Meter) {
		if measured {
			r.meter(m)
		}
	}
	port := uint16(5201 + i)
	wait := func(at time.Duration) error {
		select {
		case <-time.After(r.t0 + at - traffic.Now()):
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	switch t.Kind {
	case scenario.Bulk:
		b := &traffic.Bulk{ClientNS: clientNS, ServerNS: serverNS, Server: netip.AddrPortFrom(serverAddr, port),
			Proto: r.proto(), Upload: t.Upload, Duration: t.Duration, Size: int64(t.Size), Streams: t.Streams}
		meter(&b.Meter)
		if err := wait(t.Start); err != nil {
			return err
		}
		res, err := b.Run(ctx)
		if measured {
			r.mu.Lock()
			r.bulk = &res
			r.mu.Unlock()
		}
		return err
	case scenario.Flows:
		f := &traffic.Flows{ClientNS: clientNS, ServerNS: serverNS, Server: netip.AddrPortFrom(serverAddr, port),
			Proto: r.proto(), Upload: t.Upload, Count: t.Count, Interval: t.Interval, Weights: t.Weights, Seed: r.s.Seed + uint64(i)}
		for _, sz := range t.Sizes {
			f.Sizes = append(f.Sizes, int64(sz))
		}
		meter(&f.Meter)
		if err := wait(t.Start); err != nil {
			return err
		}
		res, err := f.Run(ctx)
		if measured {
			r.mu.Lock()
			r.flows = append(r.flows, res...)
			r.mu.Unlock()
		}
		return err
	case scenario.UDPFlood:
		var p *world.PathInfo
		if r.w.Tenants != nil {
			// Between the pair's VMs.
			p = &world.PathInfo{Client: world.PathEnd{Addr: r.w.Tenants.VM(r.w.ClientRole()).Addr}, Server: world.PathEnd{Addr: serverAddr}}
			if !measured {
				p.Client.Addr = r.w.Tenants.VM(t.Pair[0]).Addr
			}
		} else if p = r.w.Path(t.Path); p == nil {
			return nil // the path is not part of this variant
		}
		fl := &traffic.Flood{FromNS: clientNS, ToNS: serverNS, Src: p.Client.Addr, Dst: p.Server.Addr,
			Rate: t.Rate, Start: r.t0 + t.Start, Stop: r.t0 + t.Stop}
		if !t.Upload {
			fl.FromNS, fl.ToNS, fl.Src, fl.Dst = serverNS, clientNS, p.Server.Addr, p.Client.Addr
		}
		return fl.Run(ctx)
	}
	return fmt.Errorf("unknown traffic type %q", t.Kind)
}

func (r *variantRun) runEvents(ctx context.Context, events []scenario.Event) {
	for _, ev := range events {
		select {
		case <-time.After(r.t0 + ev.At - traffic.Now()):
		case <-ctx.Done():
			return
		}
		what := ev.Path
		if len(ev.Links) > 0 {
			what = strings.Join(ev.Links, ",")
		}
		rec := report.EventRecord{AtS: (traffic.Now() - r.t0).Seconds(), Path: what, Action: string(ev.Action), At: time.Now()}
		if err := r.applyEvent(ev, &rec); err != nil {
			rec.Error = err.Error()
			r.fail(fmt.Sprintf("event at %v on %s: %v", ev.At, what, err))
		}
		r.mu.Lock()
		r.events = append(r.events, rec)
		r.mu.Unlock()
	}
}

// ApplyEvent applies one event to a running world (also used by tests).
func ApplyEvent(w *world.World, ev scenario.Event) (string, error) {
	if len(ev.Links) > 0 {
		return w.ApplyLinkEvent(ev.Links, ev.Action, ev.Dir, ev.Patch)
	}
	p := w.Path(ev.Path)
	if p == nil {
		return "path not in this variant; skipped", nil
	}
	switch ev.Action {
	case scenario.ActSet:
		resp, err := world.Control(w.Dir, world.Request{Op: "set", Link: p.Link, Dir: ev.Dir, Patch: &ev.Patch})
		if err != nil {
			return "", err
		}
		st := resp.Links[p.Link]
		return "up " + st.Up.Params + "; down " + st.Down.Params, nil
	case scenario.ActDown, scenario.ActUp:
		_, err := world.Control(w.Dir, world.Request{Op: string(ev.Action), Link: p.Link, Dir: ev.Dir})
		return "", err
	case scenario.ActIfDown, scenario.ActIfUp:
		return w.SetInterface(p.Name, ev.Action == scenario.ActIfUp)
	case scenario.ActRemove:
		// The path disappears: the link goes dark and, as an interface
		// going away would make a path manager do, the client's endpoint
		// is deleted so that MPTCP closes the subflows on it.
		if _, err := world.Control(w.Dir, world.Request{Op: "down", Link: p.Link}); err != nil {
			return "", err
		}
		if p.Endpoint == nil || *p.Endpoint&pm.FlagSubflow == 0 {
			return "link down (initial path: no endpoint to delete)", nil
		}
		c, err := pm.Dial(pm.Options{NetNSName: w.Host(w.ClientRole()).NetNS})
		if err != nil {
			return "", err
		}
		defer c.Close()
		eps, err := c.Endpoints()
		if err != nil {
			return "", err
		}
		for _, e := range eps {
			if e.Addr == p.Client.Addr {
				return fmt.Sprintf("link down, endpoint id %d deleted", e.ID), c.DelEndpoint(e)
			}
		}
		return "link down (no endpoint found)", nil
	}
	return "", fmt.Errorf("unknown action %q", ev.Action)
}

func (r *variantRun) applyEvent(ev scenario.Event, rec *report.EventRecord) error {
	detail, err := ApplyEvent(r.w, ev)
	rec.Detail = detail
	return err
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

func (r *variantRun) pathMapper() report.PathMapper {
	pmap := report.PathMapper{}
	for _, p := range r.w.Paths {
		pmap[p.Client.Addr] = p.Name
	}
	return pmap
}

func (r *variantRun) summarize(samples []recorder.Sample) *report.Summary {
	r.mu.Lock()
	defer r.mu.Unlock()
	sum := &report.Summary{
		Scenario: r.s.Name, Variant: r.v.Name, Kind: string(r.v.Kind), CC: r.w.CC, Upload: r.upload,
		Events: r.events, Errors: r.errs, Metrics: map[string]float64{},
	}
	pmap := r.pathMapper()
	sum.Subflows, sum.Paths = report.SummarizeSubflows(samples, pmap, r.upload)
	for _, sf := range sum.Subflows {
		sum.Retransmits += uint64(sf.Retransmits)
		sum.BytesRetrans += sf.BytesRetrans
	}
	if r.bulk != nil {
		b := r.bulk
		sum.MPTCPUsed = b.MPTCP
		sum.Bytes = b.Bytes
		if b.LastByte > b.Start {
			sum.DurationS = (b.LastByte - b.Start).Seconds()
			sum.GoodputMbit = float64(b.Bytes) * 8 / 1e6 / sum.DurationS
		}
	}
	if r.bulk != nil {
		// Until the sender's planned end (a connection that died stalls
		// to the end) or the last byte, whichever is later.
		end := r.bulk.LastByte - r.t0
		for _, t := range r.s.Traffic {
			if t.Kind == scenario.Bulk && t.Duration > 0 {
				end = max(end, t.Start+t.Duration)
			}
		}
		if st, ok := longestStall(samples, r.bulk.Start-r.t0, end, 0); ok {
			sum.Metrics["longest_stall_ms"] = float64(st) / 1e6
		}
		if med, ok := medianGoodput(samples, r.bulk.Start-r.t0+time.Second, end); ok {
			if st, ok := longestStall(samples, r.bulk.Start-r.t0+time.Second, end, med/10); ok {
				sum.Metrics["longest_below_tenth_of_median_ms"] = float64(st) / 1e6
			}
		}
	}
	if n := len(r.events); n > 0 && r.bulk != nil {
		// What the transfer achieved once the last event had settled (1 s).
		from := time.Duration((r.events[n-1].AtS + 1) * float64(time.Second))
		if g, ok := report.GoodputBetween(samples, from, r.bulk.LastByte-r.t0); ok {
			sum.Metrics["goodput_after_last_event_mbit"] = g
		}
		if g, ok := report.GoodputBetween(samples, 0, time.Duration(r.events[0].AtS*float64(time.Second))); ok {
			sum.Metrics["goodput_before_first_event_mbit"] = g
		}
	}
	if len(r.flows) > 0 {
		fs := &report.FlowsSummary{Count: len(r.flows), BySize: map[string]report.Percentiles{}}
		var all []time.Duration
		bySize := map[int64][]time.Duration{}
		for _, f := range r.flows {
			if f.Err != "" {
				fs.Failed++
				continue
			}
			all = append(all, f.FCT)
			bySize[f.Size] = append(bySize[f.Size], f.FCT)
			sum.Bytes += f.Size
		}
		fs.FCTms = report.FCTStats(all)
		for sz, d := range bySize {
			fs.BySize[fmt.Sprintf("%dB", sz)] = report.FCTStats(d)
		}
		sum.Flows = fs
		if len(all) > 0 {
			q := stats.Durations(all, 0.5, 0.99)
			sum.FCT = &report.FCTSummary{Median: float64(q[0]) / 1e6, P99: float64(q[1]) / 1e6, Count: len(all)}
		}
	}
	return sum
}

func (r *variantRun) writeFiles(sum *report.Summary, samples []recorder.Sample) error {
	pmap := r.pathMapper()
	var names []string
	for _, p := range r.w.Paths {
		names = append(names, p.Name)
	}
	se := report.BuildSeries(samples, names, pmap, r.upload)
	var marks []report.Mark
	for _, e := range sum.Events {
		marks = append(marks, report.Mark{X: e.AtS, Label: e.Path + " " + e.Action})
	}
	title := fmt.Sprintf("%s — %s (%s)", r.s.Name, r.v.Name, r.w.CC["client"])
	return errors.Join(
		r.writeFlowsCSV(filepath.Join(r.dir, "flows.csv")),
		se.WriteCSV(filepath.Join(r.dir, "timeseries.csv")),
		recorder.WriteSubflowsCSV(filepath.Join(r.dir, "subflows.csv"), samples, pmap.Of),
		report.WriteJSON(filepath.Join(r.dir, "summary.json"), sum),
		report.PlotSeries(filepath.Join(r.dir, "goodput.png"), title, se, marks),
	)
}

// longestStall is the longest time, between from and to, in which the
// receiving application got no more than floor bits per second (0:
// nothing): from one sample interval with more progress to the next one,
// or to the last sample (so its resolution is the sampling interval).
func longestStall(samples []recorder.Sample, from, to time.Duration, floor float64) (time.Duration, bool) {
	var longest time.Duration
	var prev *recorder.Sample
	var lastProgress time.Duration
	for i := range samples {
		s := &samples[i]
		if s.T < from || s.T > to {
			continue
		}
		if prev == nil {
			prev, lastProgress = s, s.T
			continue
		}
		if float64(s.AppBytes-prev.AppBytes)*8 > floor*(s.T-prev.T).Seconds() {
			longest = max(longest, s.T-lastProgress)
			lastProgress = s.T
		}
		prev = s
	}
	if prev == nil {
		return 0, false
	}
	return max(longest, prev.T-lastProgress), true
}

// medianGoodput is the median of the sample-to-sample goodput (bit/s).
func medianGoodput(samples []recorder.Sample, from, to time.Duration) (float64, bool) {
	var g []float64
	for i := 1; i < len(samples); i++ {
		a, b := samples[i-1], samples[i]
		if a.T < from || b.T > to || b.T <= a.T {
			continue
		}
		g = append(g, float64(b.AppBytes-a.AppBytes)*8/(b.T-a.T).Seconds())
	}
	if len(g) == 0 {
		return 0, false
	}
	return stats.Float64s(g, 0.5)[0], true
}

// writeFlowsCSV writes one row per short flow (none: no file).
func (r *variantRun) writeFlowsCSV(file string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.flows) == 0 {
		return nil
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	w.Write([]string{"start_s", "size_bytes", "fct_ms", "error"})
	for _, fl := range r.flows {
		w.Write([]string{strconv.FormatFloat(fl.Start.Seconds(), 'f', 6, 64), strconv.FormatInt(fl.Size, 10),
			strconv.FormatFloat(float64(fl.FCT)/1e6, 'f', 3, 64), fl.Err})
	}
	w.Flush()
	return errors.Join(w.Error(), f.Close())
}

// readFCTs loads the completed flows' completion times (ms) of a flows.csv.
func readFCTs(file string) ([]float64, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	var out []float64
	for _, row := range rows[1:] {
		if v, err := strconv.ParseFloat(row[2], 64); err == nil && row[3] == "" {
			out = append(out, v)
		}
	}
	return out, nil
}

func writeReport(s *scenario.Scenario, res *Result) error {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", s.Name)
	if s.Description != "" {
		fmt.Fprintf(&b, "%s\n\n", strings.TrimSpace(s.Description))
	}
	fmt.Fprintf(&b, "Scenario file: `%s`. Goodput is application bytes over the whole transfer; retransmits are TCP segments summed over the sending side's subflows; shares are bytes acknowledged per path.\n\n", s.File)
	b.WriteString(report.Table(res.Summaries))
	b.WriteString("\nPer variant: `<variant>/summary.json`, `timeseries.csv`, `subflows.csv`, `goodput.png`. Comparison plot: `compare.png`.\n")
	for _, sum := range res.Summaries {
		for _, e := range sum.Errors {
			fmt.Fprintf(&b, "\n- %s: %s", sum.Variant, e)
		}
	}
	var lines, fcts []report.Line
	for _, sum := range res.Summaries {
		ts, err := readSeries(filepath.Join(res.Out, sum.Variant, "timeseries.csv"))
		if err == nil {
			lines = append(lines, report.Line{Name: sum.Variant, X: ts[0], Y: report.Smooth(ts[1], report.SmoothSamples)})
		}
		if sum.FCT != nil {
			if x, err := readFCTs(filepath.Join(res.Out, sum.Variant, "flows.csv")); err == nil {
				fcts = append(fcts, report.Line{Name: fmt.Sprintf("%s (median %.1f ms, p99 %.1f ms)", sum.Variant, sum.FCT.Median, sum.FCT.P99), X: x})
			}
		}
	}
	var cdf error
	if len(fcts) > 0 {
		cdf = report.PlotCDF(filepath.Join(res.Out, "fct_cdf.png"), s.Name+": flow completion times", "flow completion time (ms)", fcts)
	}
	return errors.Join(cdf,
		os.WriteFile(res.Report, []byte(b.String()+"\n"), 0o644),
		report.WriteJSON(filepath.Join(res.Out, "results.json"), res.Summaries),
		report.PlotLines(filepath.Join(res.Out, "compare.png"), s.Name+": application goodput, 0.5 s average", "goodput (Mbit/s)", clip(lines, s.Duration()), nil),
	)
}

// clip keeps a comparison plot to the scenario's time (a variant whose
// transfer never finished would stretch everyone's axis to its timeout);
// the whole series stay in each variant's timeseries.csv and goodput.png.
func clip(lines []report.Line, d time.Duration) []report.Line {
	if d <= 0 {
		return lines
	}
	end := (d + d/10).Seconds()
	out := make([]report.Line, len(lines))
	for i, l := range lines {
		out[i] = l
		n := 0
		for n < len(l.X) && l.X[n] <= end {
			n++
		}
		out[i].X, out[i].Y = l.X[:n], l.Y[:min(n, len(l.Y))]
	}
	return out
}

// readSeries loads time and application goodput from a timeseries.csv.
func readSeries(file string) ([2][]float64, error) {
	var out [2][]float64
	f, err := os.Open(file)
	if err != nil {
		return out, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return out, err
	}
	for _, row := range rows[1:] {
		t, err1 := strconv.ParseFloat(row[0], 64)
		g, err2 := strconv.ParseFloat(row[1], 64)
		if err1 == nil && err2 == nil {
			out[0] = append(out[0], t)
			out[1] = append(out[1], g)
		}
	}
	return out, nil
}

// recoveries turns the emulator's link-up records into times from link-up
// to the first data segment, per path, in the sending direction.
func (r *variantRun) recoveries(sum *report.Summary, links map[string]world.LinkState, samples []recorder.Sample) {
	pmap := r.pathMapper()
	for _, p := range r.w.Paths {
		st, ok := links[p.Link]
		if !ok {
			continue
		}
		dir := st.Up
		if !r.upload {
			dir = st.Down
		}
		var list, shares []float64
		for _, u := range dir.Ups {
			if u.FirstDataAt > 0 {
				list = append(list, float64(u.FirstDataAt-u.UpAt)/1e6)
			}
			// The path's share of the traffic in the second from 200 ms
			// after the link-up (times into the transfer).
			at := u.UpAt - dir.Origin
			if share, ok := shareAfter(samples, pmap, r.upload, p.Name, at+shareAfterUp, at+shareAfterUp+shareWindow); ok && dir.Origin > 0 {
				shares = append(shares, share)
			}
		}
		if len(shares) > 0 {
			sum.Metrics[p.Name+"_share_from_200ms_after_up_mean"] = mean(shares)
			sum.Metrics[p.Name+"_share_from_200ms_after_up_min"] = slices.Min(shares)
		}
		if len(list) == 0 {
			continue
		}
		if sum.Recoveries == nil {
			sum.Recoveries = map[string][]float64{}
		}
		sum.Recoveries[p.Name] = list
		sum.Metrics[p.Name+"_link_up_to_first_data_ms_mean"] = mean(list)
		sum.Metrics[p.Name+"_link_up_to_first_data_ms_median"] = stats.Float64s(list, 0.5)[0]
	}
}

func mean(xs []float64) float64 {
	m := 0.0
	for _, v := range xs {
		m += v
	}
	return m / float64(len(xs))
}

// linkShares, in a tenants world: the share of the bytes each physical
// link carried from the first hypervisor to the second and back (every
// tenant's traffic), as metrics <link>_up_share and <link>_down_share.
func (r *variantRun) linkShares(sum *report.Summary, links map[string]world.LinkState) {
	if r.w.Tenants == nil {
		return
	}
	var up, down float64
	for _, l := range r.w.Tenants.Links {
		up += float64(links[l.Name].Up.Stats.Bytes)
		down += float64(links[l.Name].Down.Stats.Bytes)
	}
	for _, l := range r.w.Tenants.Links {
		if up > 0 {
			sum.Metrics[l.Name+"_up_share"] = float64(links[l.Name].Up.Stats.Bytes) / up
		}
		if down > 0 {
			sum.Metrics[l.Name+"_down_share"] = float64(links[l.Name].Down.Stats.Bytes) / down
		}
	}
}

// floodMetrics measures a UDP flood's effect: goodput before and during
// it, and how long after it ends the goodput (0.5 s average) takes to reach
// 95% of its pre-flood level again.
func (r *variantRun) floodMetrics(sum *report.Summary, samples []recorder.Sample) {
	for _, t := range r.s.Traffic {
		if t.Kind != scenario.UDPFlood || r.w.Path(t.Path) == nil {
			continue
		}
		before, ok1 := report.GoodputBetween(samples, t.Start-2*time.Second, t.Start)
		during, ok2 := report.GoodputBetween(samples, t.Start+500*time.Millisecond, t.Stop)
		if !ok1 || !ok2 {
			return
		}
		sum.Metrics["goodput_before_flood_mbit"] = before
		sum.Metrics["goodput_during_flood_mbit"] = during
		for i := range samples {
			if samples[i].T < t.Stop {
				continue
			}
			if g, ok := report.GoodputBetween(samples, samples[i].T, samples[i].T+500*time.Millisecond); ok && g >= 0.95*before {
				sum.Metrics["recovery_after_flood_s"] = (samples[i].T - t.Stop).Seconds()
				break
			}
		}
		return
	}
}
