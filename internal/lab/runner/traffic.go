package runner

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
)

// The traffic generators of a run: the measured pairs' bulk transfers and
// short flows (their received bytes are the run's goodput), other
// tenants' background, and UDP floods.

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

// ends is one pair of hosts a traffic entry runs between.
type ends struct {
	clientNS, serverNS     string
	clientAddr, serverAddr netip.Addr
}

// endsOf are the host pairs of a traffic entry: the client and the server,
// or in a tenants world its VM pairs (every measured pair when it names
// none).
func (r *variantRun) endsOf(t scenario.Traffic) ([]ends, error) {
	first := r.w.Paths[0]
	if r.w.Tenants == nil {
		return []ends{{r.w.Host(r.w.ClientRole()).NetNS, r.w.Host(r.w.ServerRole()).NetNS, first.Client.Addr, first.Server.Addr}}, nil
	}
	var out []ends
	for _, pr := range t.Pairs(r.s) {
		cv, sv := r.w.Tenants.VM(pr[0]), r.w.Tenants.VM(pr[1])
		if cv == nil || sv == nil {
			return nil, fmt.Errorf("VM pair %s, %s is not in this world", pr[0], pr[1])
		}
		out = append(out, ends{cv.NetNS, sv.NetNS, cv.Addr, sv.Addr})
	}
	return out, nil
}

// runTraffic runs one traffic entry, between each of its host pairs at
// once (several in a tenants world with several measured pairs).
func (r *variantRun) runTraffic(ctx context.Context, i int, t scenario.Traffic) error {
	if t.Competitor {
		return r.runCompetitor(ctx, i, t, r.w.Host(r.w.ClientRole()).NetNS, r.w.Host(r.w.ServerRole()).NetNS)
	}
	// In a tenants world only the measured pairs' traffic is counted:
	// other tenants' pairs are background.
	measured := t.Measured(r.s)
	all, err := r.endsOf(t)
	if err != nil {
		return err
	}
	if len(all) == 1 {
		res, err := r.runBetween(ctx, i, t, all[0], measured)
		r.keep(t, measured, res)
		return err
	}
	var wg sync.WaitGroup
	results := make([]trafficResult, len(all))
	errs := make([]error, len(all))
	for k, e := range all {
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[k], errs[k] = r.runBetween(ctx, i, t, e, measured)
			if errs[k] != nil {
				errs[k] = fmt.Errorf("pair %d: %w", k+1, errs[k])
			}
		}()
	}
	wg.Wait()
	// One transfer of all the pairs: from the first start to the last
	// byte, every pair's bytes.
	var sum trafficResult
	for k, res := range results {
		sum.flows = append(sum.flows, res.flows...)
		if b := res.bulk; b != nil {
			if sum.bulk == nil {
				sum.bulk = &traffic.BulkResult{Start: b.Start, MPTCP: true}
			}
			sum.bulk.Start = min(sum.bulk.Start, b.Start)
			sum.bulk.LastByte = max(sum.bulk.LastByte, b.LastByte)
			sum.bulk.Bytes += b.Bytes
			sum.bulk.MPTCP = sum.bulk.MPTCP && b.MPTCP
		} else if t.Kind == scenario.Bulk && errs[k] == nil {
			errs[k] = fmt.Errorf("pair %d: no result", k+1)
		}
	}
	r.keep(t, measured, sum)
	return errors.Join(errs...)
}

// trafficResult is what a generator measured.
type trafficResult struct {
	bulk  *traffic.BulkResult
	flows []traffic.FlowResult
}

// keep records the measured traffic's results for the summary.
func (r *variantRun) keep(t scenario.Traffic, measured bool, res trafficResult) {
	if !measured {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if res.bulk != nil {
		r.bulk = res.bulk
	}
	r.flows = append(r.flows, res.flows...)
}

// runBetween runs the generator between one pair of hosts.
func (r *variantRun) runBetween(ctx context.Context, i int, t scenario.Traffic, e ends, measured bool) (trafficResult, error) {
	var out trafficResult
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
		b := &traffic.Bulk{ClientNS: e.clientNS, ServerNS: e.serverNS, Server: netip.AddrPortFrom(e.serverAddr, port),
			Proto: r.proto(), Upload: t.Upload, Duration: t.Duration, Size: int64(t.Size), Streams: t.Streams, Rates: appRates(t),
			BlockingReader: t.Reader == scenario.ReaderBlocking}
		meter(&b.Meter)
		if err := wait(t.Start); err != nil {
			return out, err
		}
		res, err := b.Run(ctx)
		out.bulk = &res
		if err != nil && ctx.Err() == nil && t.Duration > 0 && res.LastByte > res.Start {
			return out, fmt.Errorf("did not finish (%.1f of %.0f s): %w", (res.LastByte - res.Start).Seconds(), t.Duration.Seconds(), err)
		}
		return out, err
	case scenario.Flows:
		f := &traffic.Flows{ClientNS: e.clientNS, ServerNS: e.serverNS, Server: netip.AddrPortFrom(e.serverAddr, port),
			Proto: r.proto(), Upload: t.Upload, Count: t.Count, Interval: t.Interval, Weights: t.Weights, Seed: r.s.Seed + uint64(i)}
		for _, sz := range t.Sizes {
			f.Sizes = append(f.Sizes, int64(sz))
		}
		meter(&f.Meter)
		if err := wait(t.Start); err != nil {
			return out, err
		}
		res, err := f.Run(ctx)
		out.flows = res
		return out, err
	case scenario.UDPFlood:
		src, dst := e.clientAddr, e.serverAddr
		if r.w.Tenants == nil {
			p := r.w.Path(t.Path)
			if p == nil {
				return out, nil // the path is not part of this variant
			}
			src, dst = p.Client.Addr, p.Server.Addr
		}
		fl := &traffic.Flood{FromNS: e.clientNS, ToNS: e.serverNS, Src: src, Dst: dst,
			Rate: t.Rate, Start: r.t0 + t.Start, Stop: r.t0 + t.Stop}
		if !t.Upload {
			fl.FromNS, fl.ToNS, fl.Src, fl.Dst = e.serverNS, e.clientNS, dst, src
		}
		return out, fl.Run(ctx)
	}
	return out, fmt.Errorf("unknown traffic type %q", t.Kind)
}

// competitorPort is the server port of traffic entry i when it is a
// competitor (every entry has its own).
func competitorPort(i int) uint16 { return uint16(5201 + i) }

// runCompetitor runs single-path TCP over the competitor's path beside the
// measured traffic, measured apart (scenario/competitor.go).
func (r *variantRun) runCompetitor(ctx context.Context, i int, t scenario.Traffic, clientNS, serverNS string) error {
	p := r.w.Path(t.Path)
	if p == nil {
		return fmt.Errorf("the competitor's path %s is not in this world", t.Path)
	}
	b := &traffic.Bulk{ClientNS: clientNS, ServerNS: serverNS, Server: netip.AddrPortFrom(p.Server.Addr, competitorPort(i)),
		Local: p.Client.Addr, Proto: traffic.TCP, Upload: t.Upload, Duration: t.Duration, Size: int64(t.Size), Streams: t.Streams, Rates: appRates(t),
		BlockingReader: t.Reader == scenario.ReaderBlocking}
	select {
	case <-time.After(r.t0 + t.Start - traffic.Now()):
	case <-ctx.Done():
		return ctx.Err()
	}
	res, err := b.Run(ctx)
	r.mu.Lock()
	r.competitors = append(r.competitors, competitorResult{res: res, streams: max(t.Streams, 1)})
	r.mu.Unlock()
	if err != nil && ctx.Err() == nil && t.Duration > 0 && res.LastByte > res.Start {
		return fmt.Errorf("competitor did not finish (%.1f of %.0f s): %w", (res.LastByte - res.Start).Seconds(), t.Duration.Seconds(), err)
	}
	return err
}

type competitorResult struct {
	res     traffic.BulkResult
	streams int
}

// competitorPorts are the server ports of the scenario's competitors.
func (r *variantRun) competitorPorts() map[uint16]bool {
	out := map[uint16]bool{}
	for i, t := range r.s.Traffic {
		if t.Competitor {
			out[competitorPort(i)] = true
		}
	}
	return out
}

// appRates is a bulk sender's rate schedule for the generator.
func appRates(t scenario.Traffic) []traffic.RateStep {
	var out []traffic.RateStep
	for _, st := range t.AppRates {
		out = append(out, traffic.RateStep{At: st.At, BytesPerSec: st.Rate.BytesPerSecond()})
	}
	return out
}
