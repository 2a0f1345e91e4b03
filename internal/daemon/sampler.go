package daemon

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
)

// How the daemon reads its namespace's subflows every interval.
const (
	// SamplerAuto: whichever of the BPF iterator and sock_diag reads the
	// namespace faster, measured as the daemon runs (samplerPick); sock_diag
	// alone where the iterator does not load.
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
// writes one fixed record per subflow and takes no socket lock. At a few
// it can cost more (samplerPick): under auto the daemon uses the faster.
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
	if how != SamplerIterator {
		d.pick = &samplerPick{}
	}
	return nil
}

// The ways samplerPick chooses between.
const (
	wayIterator = iota
	wayDiag
)

// pickRetry: under auto, the way not in use is timed again after this
// many samples read with the one in use, so a change (the host's subflows
// grow from ten to ten thousand) is seen within seconds at the default
// interval.
const pickRetry = 50

// pickProbe: each timing of the way not in use reads this many samples
// with it and takes their mean: one read's time alone is too noisy to
// switch on (in the lab, where the two ways cost about the same, single
// reads made the daemon switch back and forth).
const pickProbe = 4

// pickMargin: the way not in use must cost under this share of the one
// in use to take over, so two ways that cost about the same do not take
// turns.
const pickMargin = 0.8

// samplerPick chooses, sample by sample, the faster of the BPF iterator
// and an inet_diag dump. Neither is faster everywhere: the kernel's TCP
// iterator has a fixed cost per read that a dump does not, a dump builds
// and parses netlink attributes per socket that the iterator does not
// (`mpsteer bench observe`, docs/results.md "Control plane"), and where
// they cross depends on the kernel and the host. The cost of the way in
// use is a moving average of its reads' times; the other's is the mean of
// its last probe. Both report the same subflows (subflowiter's
// TestIteratorMatchesSockDiag), so the daemon may switch between samples;
// only BBR's own state is the iterator's alone (see bbr).
type samplerPick struct {
	// bbr: a policy reads BBR's state (policy.Requirements.BBRState),
	// which only the iterator gives: it is used, and not timed, while so.
	bbr   atomic.Bool
	cost  [2]time.Duration // per way; 0 until it is timed
	using int
	since int // samples read with the way in use since the last probe
	// The probe of the way not in use under way: its reads' total and count.
	probeSum time.Duration
	probeN   int
}

// next says which way to read the next sample with: the one in use, and
// the other for a probe of pickProbe reads at the start and after every
// pickRetry samples.
func (p *samplerPick) next() int {
	if p.bbr.Load() {
		return wayIterator
	}
	if p.cost[p.using] != 0 && p.since >= pickRetry {
		return 1 - p.using
	}
	return p.using
}

// record takes the time a read with way w took and says whether the way
// in use changed (only at the end of a probe).
func (p *samplerPick) record(w int, took time.Duration) bool {
	if p.bbr.Load() {
		return false
	}
	took = max(took, time.Nanosecond)
	if w == p.using {
		if p.cost[w] == 0 {
			p.cost[w] = took
			p.since = pickRetry // the other is timed at once
		} else {
			p.cost[w] = (3*p.cost[w] + took) / 4
			p.since++
		}
		return false
	}
	p.probeSum += took
	if p.probeN++; p.probeN < pickProbe {
		return false
	}
	p.cost[w] = p.probeSum / time.Duration(p.probeN)
	p.probeSum, p.probeN, p.since = 0, 0, 0
	if float64(p.cost[w]) < pickMargin*float64(p.cost[p.using]) {
		p.using = w
		return true
	}
	return false
}

// needBBRState keeps the sampler in line with whether a policy reads BBR's
// state (under mu): the iterator, the only way that has it, is used
// whatever it costs while one does; said once where it did not load.
func (d *Daemon) needBBRState(need bool) {
	if d.pick != nil && d.pick.bbr.Swap(need) != need && need {
		d.log.Printf("subflows are read by the BPF iterator while a policy reads BBR's state, whatever a read costs against sock_diag (--sampler %s)", SamplerAuto)
	}
	if need && d.iter == nil && !d.bbrStateSaid {
		d.bbrStateSaid = true
		d.log.Printf("a policy reads BBR's state, which only the BPF iterator gives, and it is not in use: what needs it does not act (ecf's probe_rtt_rest)")
	}
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
	// deferred: an extra sample asked for too soon is due then, when
	// deferredGap has passed since the last one.
	var deferred <-chan time.Time
	var deferredGap time.Duration
	take := func() {
		s := d.readSample()
		lastCost, lastEnd = s.end.Sub(s.start), s.end
		d.in.mark(func(in *inbox) { in.sample = s })
	}
	// ask takes an extra sample once gap has passed since the last one:
	// at once, or as soon as that allows, not dropped (a joiner would
	// wait for the next tick).
	ask := func(gap time.Duration) {
		if since := time.Since(lastEnd); since >= gap {
			take()
		} else if deferred == nil || gap < deferredGap {
			deferred, deferredGap = time.After(gap-since), gap
		}
	}
	take()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			take()
		case <-d.in.wantSample:
			ask(max(minSampleGap, lastCost))
		case <-d.in.wantSampleNow:
			// A join the watch saw complete (joinwatch.go): its MP_PRIO
			// waits for this sample. Spaced only by the last read's cost
			// (at most half the time in reads), once per join.
			ask(lastCost)
		case <-deferred:
			deferred = nil
			if time.Since(lastEnd) >= deferredGap {
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
	way := wayDiag
	if d.pick != nil {
		way = d.pick.next()
	} else if d.iter != nil {
		way = wayIterator
	}
	if way == wayIterator {
		s.subflows, s.err = d.iter.Subflows(d.in.takeSpare())
	} else {
		s.subflows, s.err = d.sampler.Subflows()
	}
	if d.pick != nil && s.err == nil && d.pick.record(way, time.Since(s.start)) {
		d.log.Printf("subflows are read by %s now: %v a read against %v (--sampler %s)",
			wayName(d.pick.using), d.pick.cost[d.pick.using], d.pick.cost[1-d.pick.using], SamplerAuto)
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

func wayName(w int) string {
	if w == wayIterator {
		return "the BPF iterator"
	}
	return SamplerDiag
}
