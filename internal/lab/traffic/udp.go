package traffic

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/monoclock"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/units"
)

func listenUDP(ns string, addr netip.AddrPort) (*net.UDPConn, error) {
	var c *net.UDPConn
	err := netnsutil.Do(ns, func() error {
		var err error
		c, err = net.ListenUDP("udp", net.UDPAddrFromAddrPort(addr))
		return err
	})
	return c, err
}

// Flood sends UDP datagrams of 1472 bytes (1500-byte packets) from Src to
// Dst at Rate, from Start until Stop (times on the Now clock), competing
// with the transport traffic on that path.
type Flood struct {
	FromNS, ToNS string
	Src, Dst     netip.Addr
	Rate         units.Rate
	Start, Stop  time.Duration
	Sent         int64
}

const floodPayload = 1472

// Run blocks until the flood is over.
func (f *Flood) Run(ctx context.Context) error {
	sink, err := listenUDP(f.ToNS, netip.AddrPortFrom(f.Dst, 9))
	if err != nil {
		return fmt.Errorf("udp flood sink: %w", err)
	}
	defer sink.Close()
	go func() {
		buf := make([]byte, 2048)
		for {
			if _, _, err := sink.ReadFromUDPAddrPort(buf); err != nil {
				return
			}
		}
	}()
	src, err := listenUDP(f.FromNS, netip.AddrPortFrom(f.Src, 0))
	if err != nil {
		return fmt.Errorf("udp flood source: %w", err)
	}
	defer src.Close()
	dst := netip.AddrPortFrom(f.Dst, 9)
	if err := sleepUntil(ctx, f.Start); err != nil {
		return err
	}
	payload := make([]byte, floodPayload)
	// Send in 1 ms rounds: each round catches up with what the rate allows
	// by now, so scheduling hiccups do not lower the average rate.
	perSec := f.Rate.BytesPerSecond() / 1500
	begin := Now()
	for Now() < f.Stop && ctx.Err() == nil {
		due := int64(perSec * (Now() - begin).Seconds())
		// A rate faster than the socket sends is never caught up with:
		// the round ends at Stop all the same.
		for f.Sent < due && Now() < f.Stop {
			if _, err := src.WriteToUDPAddrPort(payload, dst); err != nil {
				break // a full socket buffer: the link is saturated anyway
			}
			f.Sent++
		}
		time.Sleep(time.Millisecond)
	}
	return nil
}

func sleepUntil(ctx context.Context, t time.Duration) error {
	if d := t - Now(); d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// Echo answers UDP probes in a namespace until closed.
type Echo struct {
	c *net.UDPConn
}

// StartEcho listens on addr inside ns.
func StartEcho(ns string, addr netip.AddrPort) (*Echo, error) {
	c, err := listenUDP(ns, addr)
	if err != nil {
		return nil, fmt.Errorf("echo: %w", err)
	}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, from, err := c.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			c.WriteToUDPAddrPort(buf[:n], from)
		}
	}()
	return &Echo{c: c}, nil
}

// Close stops the echo.
func (e *Echo) Close() error { return e.c.Close() }

// Probe is one echo probe's fate.
type Probe struct {
	Seq  uint64
	Sent time.Duration
	RTT  time.Duration // 0 = lost
}

// ProbeRun sends Count probes of Size bytes every Interval and waits Grace
// after the last for late answers.
type ProbeRun struct {
	NS       string
	Src      netip.Addr
	Dst      netip.AddrPort
	Count    int
	Interval time.Duration
	Size     int
	Grace    time.Duration
}

// Run sends the probes and returns them in order.
func (p *ProbeRun) Run(ctx context.Context) ([]Probe, error) {
	c, err := listenUDP(p.NS, netip.AddrPortFrom(p.Src, 0))
	if err != nil {
		return nil, fmt.Errorf("probe: %w", err)
	}
	defer c.Close()
	size := max(p.Size, 16)
	probes := make([]Probe, p.Count)
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 2048)
		for {
			n, err := c.Read(buf)
			if err != nil {
				return
			}
			now := Now()
			if n < 16 {
				continue
			}
			seq := binary.BigEndian.Uint64(buf)
			sent := time.Duration(binary.BigEndian.Uint64(buf[8:]))
			mu.Lock()
			if seq < uint64(len(probes)) && probes[seq].RTT == 0 {
				probes[seq].RTT = now - sent
			}
			mu.Unlock()
		}
	}()
	buf := make([]byte, size)
	// The sender owns a thread with fine timer slack: probes leave on an
	// absolute schedule, probe i at start + i·interval.
	monoclock.ReserveThreads(1)
	defer monoclock.ReserveThreads(-1)
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	monoclock.PreciseThread()
	start := Now()
	for i := 0; i < p.Count && ctx.Err() == nil; i++ {
		monoclock.SleepUntil(start + time.Duration(i)*p.Interval)
		now := Now()
		binary.BigEndian.PutUint64(buf, uint64(i))
		binary.BigEndian.PutUint64(buf[8:], uint64(now))
		mu.Lock()
		probes[i] = Probe{Seq: uint64(i), Sent: now}
		mu.Unlock()
		if _, err := c.WriteToUDPAddrPort(buf, p.Dst); err != nil {
			return nil, fmt.Errorf("probe send: %w", err)
		}
	}
	select {
	case <-time.After(p.Grace):
	case <-ctx.Done():
	}
	c.Close()
	<-done
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	return probes, nil
}

// RTTs returns the round-trip times of the probes that came back, sorted.
func RTTs(ps []Probe) []time.Duration {
	var out []time.Duration
	for _, p := range ps {
		if p.RTT > 0 {
			out = append(out, p.RTT)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// ErrNoAnswers means not one probe came back.
var ErrNoAnswers = errors.New("no probe was answered")
