package runner

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
)

// The traffic generators of a run: the measured pair's bulk transfers and
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

func (r *variantRun) runTraffic(ctx context.Context, i int, t scenario.Traffic) error {
	clientNS := r.w.Host(r.w.ClientRole()).NetNS
	serverNS := r.w.Host(r.w.ServerRole()).NetNS
	if t.Competitor {
		return r.runCompetitor(ctx, i, t, clientNS, serverNS)
	}
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
		if err != nil && ctx.Err() == nil && t.Duration > 0 && res.LastByte > res.Start {
			return fmt.Errorf("did not finish (%.1f of %.0f s): %w", (res.LastByte - res.Start).Seconds(), t.Duration.Seconds(), err)
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
		Local: p.Client.Addr, Proto: traffic.TCP, Upload: t.Upload, Duration: t.Duration, Size: int64(t.Size), Streams: t.Streams}
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
