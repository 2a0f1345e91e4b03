// Package bench measures mpsteer's own costs: one observer sample against
// the number of subflows, the daemon's reaction to a kernel event, and the
// datapath. Results are JSON for `mpsteer bench`; they are measurements,
// never pass/fail assertions (the machine is shared and noisy).
package bench

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"sync"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
	"mpsteer/internal/stats"
)

// ObserveResult is the cost of one sample at a number of subflows.
type ObserveResult struct {
	Subflows       int     `json:"subflows"`
	Samples        int     `json:"samples"`
	MedianUs       float64 `json:"median_us_per_sample"`
	P90Us          float64 `json:"p90_us_per_sample"`
	NsPerSubflow   float64 `json:"ns_per_subflow"`
	AllocBytes     float64 `json:"alloc_bytes_per_sample"`
	SetupConnsPerS float64 `json:"setup_connections_per_s"`
	// The BPF iterator the daemon samples with (subflowiter), timed in the
	// same rounds as sock_diag, alternately.
	IterMedianUs     float64 `json:"iterator_median_us_per_sample"`
	IterP90Us        float64 `json:"iterator_p90_us_per_sample"`
	IterNsPerSubflow float64 `json:"iterator_ns_per_subflow"`
	IterAllocBytes   float64 `json:"iterator_alloc_bytes_per_sample"`
	// IterRatio is the iterator's median over sock_diag's.
	IterRatio float64 `json:"iterator_ratio_to_sock_diag"`
}

// Observe measures observe.Sampler.Subflows with n MPTCP subflows alive in
// a namespace (n/2 loopback connections: a client and a server subflow
// each).
func Observe(ctx context.Context, sizes []int, progress func(string)) ([]ObserveResult, error) {
	var out []ObserveResult
	for _, n := range sizes {
		r, err := observeOne(ctx, n, progress)
		if err != nil {
			return out, fmt.Errorf("%d subflows: %w", n, err)
		}
		out = append(out, r)
	}
	return out, nil
}

func observeOne(ctx context.Context, n int, progress func(string)) (ObserveResult, error) {
	res := ObserveResult{Subflows: n}
	ns := fmt.Sprintf("mpb%d-obs%d", os.Getpid()%100000, n)
	if err := netnsutil.Create(ns); err != nil {
		return res, err
	}
	defer netnsutil.Delete(ns)
	if err := netnsutil.Sysctl(ns, "net.mptcp.enabled", "1"); err != nil {
		return res, err
	}
	addr := netip.MustParseAddrPort("127.0.0.1:7100")
	var ln net.Listener
	err := netnsutil.Do(ns, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(ctx, "tcp", addr.String())
		return err
	})
	if err != nil {
		return res, err
	}
	defer ln.Close()
	var mu sync.Mutex
	var conns []net.Conn
	defer func() {
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	}()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	progress(fmt.Sprintf("observe: opening %d MPTCP connections (%d subflows)", n/2, n))
	start := time.Now()
	err = netnsutil.Do(ns, func() error {
		var d net.Dialer
		d.SetMultipathTCP(true)
		for i := 0; i < n/2; i++ {
			c, err := d.DialContext(ctx, "tcp", addr.String())
			if err != nil {
				return err
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	res.SetupConnsPerS = float64(n/2) / time.Since(start).Seconds()
	s, err := observe.NewSamplerIn(ns)
	if err != nil {
		return res, err
	}
	defer s.Close()
	// Wait until the kernel shows them all.
	for deadline := time.Now().Add(10 * time.Second); ; {
		sfs, err := s.Subflows()
		if err != nil {
			return res, err
		}
		if len(sfs) >= n {
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("only %d of %d subflows appeared within 10 s", len(sfs), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	it, err := subflowiter.New()
	if err != nil {
		return res, err
	}
	defer it.Close()
	reps := max(5, min(200, 20000/max(n, 1)))
	var times, iterTimes []time.Duration
	var diagAlloc, iterAlloc uint64
	var buf []observe.Subflow
	// Alternately, in the namespace (the iterator reports its reader's).
	err = netnsutil.Do(ns, func() error {
		var ms0, ms1 runtime.MemStats
		for i := 0; i < reps; i++ {
			runtime.ReadMemStats(&ms0)
			t0 := time.Now()
			if _, err := s.Subflows(); err != nil {
				return err
			}
			times = append(times, time.Since(t0))
			runtime.ReadMemStats(&ms1)
			diagAlloc += ms1.TotalAlloc - ms0.TotalAlloc
			t0 = time.Now()
			sfs, err := it.Subflows(buf)
			if err != nil {
				return err
			}
			iterTimes = append(iterTimes, time.Since(t0))
			runtime.ReadMemStats(&ms0)
			iterAlloc += ms0.TotalAlloc - ms1.TotalAlloc
			if len(sfs) < n {
				return fmt.Errorf("the iterator saw %d of %d subflows", len(sfs), n)
			}
			buf = sfs // the daemon reuses its arrays too
		}
		return nil
	})
	if err != nil {
		return res, err
	}
	q := stats.Durations(times, 0.5, 0.9)
	res.Samples = reps
	res.MedianUs = float64(q[0]) / 1e3
	res.P90Us = float64(q[1]) / 1e3
	res.NsPerSubflow = float64(q[0]) / float64(n)
	res.AllocBytes = float64(diagAlloc) / float64(reps)
	qi := stats.Durations(iterTimes, 0.5, 0.9)
	res.IterMedianUs = float64(qi[0]) / 1e3
	res.IterP90Us = float64(qi[1]) / 1e3
	res.IterNsPerSubflow = float64(qi[0]) / float64(n)
	res.IterAllocBytes = float64(iterAlloc) / float64(reps)
	res.IterRatio = float64(qi[0]) / float64(q[0])
	return res, nil
}
