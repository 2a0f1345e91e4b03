package daemon

import (
	"context"
	"fmt"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
)

// How the daemon reads its namespace's subflows every interval.
const (
	// SamplerAuto: the BPF iterator where it loads, else sock_diag.
	SamplerAuto = "auto"
	// SamplerIterator: the BPF iterator (internal/observe/subflowiter),
	// one fixed record per subflow; refused at start if it cannot load.
	SamplerIterator = "iterator"
	// SamplerDiag: inet_diag dumps (internal/observe), the kernel
	// building and the daemon parsing netlink attributes per socket.
	SamplerDiag = "sock_diag"
)

// openIterator loads the subflow iterator unless told to use sock_diag.
// At thousands of subflows the iterator costs a fraction of a dump: it
// writes one fixed record per subflow and takes no socket lock.
func (d *Daemon) openIterator(how string) error {
	switch how {
	case "", SamplerAuto, SamplerIterator:
	case SamplerDiag:
		return nil
	default:
		return fmt.Errorf("--sampler %q: want %s, %s or %s", how, SamplerAuto, SamplerIterator, SamplerDiag)
	}
	it, err := subflowiter.New()
	if err != nil {
		if how == SamplerIterator {
			return fmt.Errorf("--sampler %s: %w", SamplerIterator, err)
		}
		d.log.Printf("subflows are read by sock_diag: the BPF iterator did not load (%v)", err)
		return nil
	}
	d.iter = it
	return nil
}

// minSampleGap: an extra sample asked for (a subflow joined as backup
// waits for one) comes no sooner than this after the last one ended, nor
// sooner than the last one took, so a storm of joins on a large host
// costs at most half the daemon's time in extra samples.
const minSampleGap = 20 * time.Millisecond

// sampleLoop reads the namespace every interval, and sooner when asked,
// and hands each sample to the loop. It reads without the daemon's lock:
// a round in progress is not held up by a read, nor an event by a round's
// read.
func (d *Daemon) sampleLoop(ctx context.Context) {
	d.mu.Lock()
	iv := d.cfg.Interval
	d.mu.Unlock()
	tick := time.NewTicker(iv)
	defer tick.Stop()
	var lastCost time.Duration
	var lastEnd time.Time
	// deferred: an extra sample asked for too soon is due then.
	var deferred <-chan time.Time
	take := func() {
		s := d.readSample()
		lastCost, lastEnd = s.end.Sub(s.start), s.end
		d.in.mark(func(in *inbox) { in.sample = s })
	}
	take()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			take()
		case <-d.in.wantSample:
			gap := max(minSampleGap, lastCost)
			if since := time.Since(lastEnd); since >= gap {
				take()
			} else if deferred == nil {
				// Taken as soon as that allows, not dropped: a joiner would
				// wait for the next tick.
				deferred = time.After(gap - since)
			}
		case <-deferred:
			deferred = nil
			if time.Since(lastEnd) >= minSampleGap {
				take()
			}
		case <-d.in.newInterval:
		}
		d.mu.Lock()
		if now := d.cfg.Interval; now != iv {
			iv = now
			tick.Reset(iv)
		}
		d.mu.Unlock()
	}
}

// readSample reads every subflow of the namespace and the connections.
// The iterator fills an array the loop gave back (no one's since the
// round that replaced it).
func (d *Daemon) readSample() *sample {
	s := &sample{start: time.Now()}
	if d.iter != nil {
		s.subflows, s.err = d.iter.Subflows(d.in.takeSpare())
	} else {
		s.subflows, s.err = d.sampler.Subflows()
	}
	if s.err == nil {
		s.conns, s.connsErr = d.readConns(s.subflows)
	}
	s.end = time.Now()
	return s
}

// readConns reads the MPTCP connections (their own counters and cgroup).
// When the policies let quiet connections be (quiet.go) and no subflow
// belongs to a connection the last read lacks, the last read stands for up
// to quietRefresh: the policies that run then judge connections by their
// subflows, and a dump costs per connection what deciding a busy one does.
func (d *Daemon) readConns(sfs []observe.Subflow) (map[uint32]observe.Conn, error) {
	d.mu.Lock()
	last, at, known := d.view.conns, d.connsReadAt, d.view.connsKnown
	reuse := known && d.engine.QuietAware() && last != nil && time.Since(at) < quietRefresh
	d.mu.Unlock()
	for i := 0; reuse && i < len(sfs); i++ {
		// A connection the last read caught before its addresses were
		// set (0.0.0.0:0 while connecting) is read again.
		c, ok := last[sfs[i].Token]
		reuse = ok && !c.Remote.Addr().IsUnspecified()
	}
	if reuse {
		return last, nil
	}
	cs, err := d.sampler.Conns()
	if err != nil {
		return nil, err
	}
	conns := make(map[uint32]observe.Conn, len(cs))
	for _, c := range cs {
		conns[c.Token] = c
	}
	d.mu.Lock()
	d.connsReadAt = time.Now()
	d.mu.Unlock()
	return conns, nil
}
