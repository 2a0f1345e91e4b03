package bench

import (
	"context"
	"encoding/csv"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
)

// The rate bench: each way the daemon can hold a subflow to a rate
// (rate_via: pacing, rwnd, cc), on the same upload, side by side. Two
// paths of 50 Mbit/s and 10 ms one way; the `limit` policy caps the
// subflow on path b at 20 Mbit/s from the start, at 5 Mbit/s from 4 s,
// and lifts the cap at 8 s (config changes through the daemon's API).
const (
	rateScenario = `
hosts: {client: {rmem: 8MiB, wmem: 8MiB}, server: {rmem: 8MiB, wmem: 8MiB}}
paths:
  - {name: a, rate: 50mbit, delay: 10ms, queue: 100pkt}
  - {name: b, rate: 50mbit, delay: 10ms, queue: 100pkt}
`
	rateLength = 12 * time.Second
	rateTick   = 50 * time.Millisecond
)

// rateStep is one phase of the run: the cap from At on (0: none).
type rateStep struct {
	At   time.Duration
	Mbit float64
}

var rateSteps = []rateStep{{0, 20}, {4 * time.Second, 5}, {8 * time.Second, 0}}

// RateWay is what one way of capping did.
type RateWay struct {
	Via string `json:"rate_via"`
	// Held: per capped phase, the rate the subflow carried from 1 s after
	// the cap was set to the phase's end, and its error against the cap.
	Held []RateHeld `json:"held"`
	// SettleMs: from the cut to 5 Mbit/s until the subflow's rate (over
	// 200 ms) first stays within 10% of it.
	SettleMs float64 `json:"settle_after_cut_ms"`
	// SRTTCappedMs: the capped subflow's median SRTT while at 5 Mbit/s
	// (the path's own RTT is 20 ms: more is queueing the cap let build).
	SRTTCappedMs float64 `json:"srtt_while_capped_ms"`
	// LiftMs: from the lift until the subflow carries 30 Mbit/s (over
	// 200 ms); -1: not within the run.
	LiftMs float64 `json:"lift_to_30mbit_ms"`
	// CCWhileCapped and CCAfterLift: the capped subflow's congestion
	// control (cc switches it and back).
	CCWhileCapped string  `json:"cc_while_capped"`
	CCAfterLift   string  `json:"cc_after_lift"`
	GoodputMbit   float64 `json:"goodput_mbit"`
}

// RateHeld is one capped phase.
type RateHeld struct {
	CapMbit  float64 `json:"cap_mbit"`
	Mbit     float64 `json:"carried_mbit"`
	ErrorPct float64 `json:"error_pct"`
}

// RateResult is the whole bench.
type RateResult struct {
	Ways    []RateWay `json:"ways"`
	Setup   string    `json:"setup"`
	Plot    string    `json:"plot"`
	Command string    `json:"command"`
}

// Rate runs the bench, writing the per-tick series (CSV) and a plot under out.
func Rate(ctx context.Context, binary, out string, progress func(string)) (*RateResult, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	res := &RateResult{Command: "mpsteer bench rate", Plot: filepath.Join(out, "rate.png"),
		Setup: "two paths of 50 Mbit/s, 10 ms one way, 100-packet queues; an MPTCP upload of 12 s; the limit policy caps the subflow on path b at 20 Mbit/s, at 5 Mbit/s from 4 s, none from 8 s (the daemon's API); the client samples the subflow every 50 ms"}
	var lines []report.Line
	for _, via := range []string{"pacing", "rwnd", "cc"} {
		progress(fmt.Sprintf("rate: rate_via %s (%s)", via, rateLength))
		w, series, err := rateRun(ctx, binary, via)
		if err != nil {
			return nil, fmt.Errorf("rate_via %s: %w", via, err)
		}
		res.Ways = append(res.Ways, w)
		progress(fmt.Sprintf("rate: %s: held %.2f / %.2f Mbit/s, settled in %.0f ms, srtt %.1f ms, lifted in %.0f ms",
			via, w.Held[0].Mbit, w.Held[1].Mbit, w.SettleMs, w.SRTTCappedMs, w.LiftMs))
		if err := writeRateCSV(filepath.Join(out, "rate-"+via+".csv"), series); err != nil {
			return nil, err
		}
		l := report.Line{Name: via}
		for _, p := range series {
			l.X, l.Y = append(l.X, p.t.Seconds()), append(l.Y, p.mbit)
		}
		lines = append(lines, l)
	}
	capLine := report.Line{Name: "cap", Dash: true}
	for t := time.Duration(0); t <= rateLength; t += rateTick {
		capLine.X, capLine.Y = append(capLine.X, t.Seconds()), append(capLine.Y, capAt(t))
	}
	lines = append(lines, capLine)
	err := report.PlotLines(res.Plot, "subflow on path b, capped 20 → 5 Mbit/s → lifted (200 ms mean)", "Mbit/s", lines,
		[]report.Mark{{X: 4, Label: "5 Mbit/s"}, {X: 8, Label: "lifted"}})
	return res, err
}

// capAt is the cap in force at t (Mbit/s; the path's 50 when lifted, for the plot).
func capAt(t time.Duration) float64 {
	c := 0.0
	for _, s := range rateSteps {
		if t >= s.At {
			c = s.Mbit
		}
	}
	if c == 0 {
		return 50
	}
	return c
}

// ratePoint is one tick of the capped subflow: its rate over the last
// 200 ms, SRTT and congestion control.
type ratePoint struct {
	t    time.Duration
	mbit float64
	srtt time.Duration
	cc   string
}

func limitConfig(via string, mbit float64) string {
	if mbit == 0 {
		return fmt.Sprintf("rate_via: %s\npolicies: []\n", via)
	}
	return fmt.Sprintf("rate_via: %s\npolicies: [{name: limit, rates: {b: %gmbit}}]\n", via, mbit)
}

func rateRun(ctx context.Context, binary, via string) (RateWay, []ratePoint, error) {
	w := RateWay{Via: via, LiftMs: -1}
	s, err := scenario.Parse("rate.yaml", []byte(rateScenario))
	if err != nil {
		return w, nil, err
	}
	plan, err := world.NewPlan(fmt.Sprintf("rate%d", os.Getpid()%100000), s, s.Variant("mptcp"))
	if err != nil {
		return w, nil, err
	}
	wd, err := world.Up(ctx, plan, world.Options{Binary: binary})
	if err != nil {
		return w, nil, err
	}
	defer wd.Down()
	client, server := wd.Host(world.Client).NetNS, wd.Host(world.Server).NetNS
	b := wd.Path("b").Client.Addr
	d, err := startDaemon(binary, client, limitConfig(via, rateSteps[0].Mbit))
	if err != nil {
		return w, nil, err
	}
	defer d.stop()
	sampler, err := observe.NewSamplerIn(client)
	if err != nil {
		return w, nil, err
	}
	defer sampler.Close()

	bulk := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: netip.AddrPortFrom(wd.Paths[0].Server.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: rateLength}
	type outcome struct {
		r   traffic.BulkResult
		err error
	}
	done := make(chan outcome, 1)
	go func() { r, err := bulk.Run(ctx); done <- outcome{r, err} }()

	var series []ratePoint
	var acked []uint64 // per tick
	start := time.Now()
	step := 1
	tick := time.NewTicker(rateTick)
	defer tick.Stop()
	for now := time.Duration(0); now < rateLength-100*time.Millisecond; now = time.Since(start) {
		select {
		case <-ctx.Done():
			return w, nil, ctx.Err()
		case <-tick.C:
		}
		if step < len(rateSteps) && now >= rateSteps[step].At {
			cfg := limitConfig(via, rateSteps[step].Mbit)
			file := filepath.Join(d.dir, "config.yaml")
			if err := os.WriteFile(file, []byte(cfg), 0o644); err != nil {
				return w, nil, err
			}
			rep, err := d.client.Apply(api.ApplyRequest{File: file, Config: cfg})
			if err != nil || !rep.OK {
				return w, nil, fmt.Errorf("apply the cap of step %d: %v %s", step, err, rep.Error)
			}
			step++
		}
		sfs, err := sampler.Subflows()
		if err != nil {
			return w, nil, err
		}
		p := ratePoint{t: now}
		var n uint64
		for _, sf := range sfs {
			if sf.Local.Addr() == b {
				n += sf.BytesAcked
				p.srtt, p.cc = sf.SRTT, sf.CC
			}
		}
		acked = append(acked, n)
		if k := len(acked) - 1; k >= 4 {
			p.mbit = float64(acked[k]-acked[k-4]) * 8 / 1e6 / (4 * rateTick).Seconds()
		}
		series = append(series, p)
	}
	o := <-done
	if o.err != nil {
		return w, nil, o.err
	}
	if d := o.r.LastByte - o.r.Start; d > 0 {
		w.GoodputMbit = float64(o.r.Bytes) * 8 / 1e6 / d.Seconds()
	}
	rateFigures(&w, series)
	return w, series, nil
}

// rateFigures derives a way's figures from its series.
func rateFigures(w *RateWay, series []ratePoint) {
	between := func(from, to time.Duration) []ratePoint {
		var out []ratePoint
		for _, p := range series {
			if p.t >= from && p.t < to {
				out = append(out, p)
			}
		}
		return out
	}
	for i, s := range rateSteps {
		if s.Mbit == 0 {
			continue
		}
		end := rateLength
		if i+1 < len(rateSteps) {
			end = rateSteps[i+1].At
		}
		ps := between(s.At+time.Second, end)
		var sum float64
		for _, p := range ps {
			sum += p.mbit
		}
		h := RateHeld{CapMbit: s.Mbit}
		if len(ps) > 0 {
			h.Mbit = sum / float64(len(ps))
			h.ErrorPct = 100 * (h.Mbit - s.Mbit) / s.Mbit
		}
		w.Held = append(w.Held, h)
	}
	cut, lift := rateSteps[1], rateSteps[2]
	capped := between(cut.At, lift.At)
	w.SettleMs = -1
	for i, p := range capped {
		if p.t < cut.At+200*time.Millisecond {
			continue // its 200 ms window still holds time before the cut
		}
		stays := true
		for _, q := range capped[i:] {
			if q.mbit > 1.1*cut.Mbit || q.mbit < 0.9*cut.Mbit {
				stays = false
				break
			}
		}
		if stays {
			w.SettleMs = float64((p.t - cut.At).Milliseconds())
			break
		}
	}
	var srtts []float64
	for _, p := range between(cut.At+time.Second, lift.At) {
		srtts = append(srtts, float64(p.srtt.Microseconds())/1000)
		w.CCWhileCapped = p.cc
	}
	if len(srtts) > 0 {
		slices.Sort(srtts)
		w.SRTTCappedMs = srtts[len(srtts)/2]
	}
	for _, p := range between(lift.At, rateLength) {
		w.CCAfterLift = p.cc
		if w.LiftMs < 0 && p.mbit >= 30 {
			w.LiftMs = float64((p.t - lift.At).Milliseconds())
		}
	}
}

func writeRateCSV(file string, series []ratePoint) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	cw := csv.NewWriter(f)
	cw.Write([]string{"time_s", "mbit_200ms", "srtt_ms", "cc", "cap_mbit"})
	for _, p := range series {
		cw.Write([]string{strconv.FormatFloat(p.t.Seconds(), 'f', 3, 64), strconv.FormatFloat(p.mbit, 'f', 3, 64),
			strconv.FormatFloat(float64(p.srtt.Microseconds())/1000, 'f', 3, 64), p.cc, strconv.FormatFloat(capAt(p.t), 'f', 0, 64)})
	}
	cw.Flush()
	if err := cw.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
