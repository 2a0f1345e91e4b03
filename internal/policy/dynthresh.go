package policy

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// DynThresh is the extended dynamic threshold scheduler (paper:
// asymmetric-subflows-dynamic-threshold). Per subflow, m = cwnd·MSS/SRTT
// and its best recorded value; the threshold is the best single-subflow
// value recorded. When the sum of m over the active subflows falls below
// it, the worst active subflow is set aside (made backup). A set-aside
// subflow gets a short transmit window every probe interval so its metrics
// stay fresh, and it returns when the sum with it reaches the threshold
// again. Each probe costs the connection a little (data sent on the bad
// path arrives late), so the interval doubles after every failed probe, up
// to MaxProbeInterval, and starts again at ProbeInterval when the subflow
// comes back.
type DynThresh struct {
	mu               sync.Mutex
	ProbeInterval    time.Duration
	MaxProbeInterval time.Duration
	ProbeWindow      time.Duration // at least 2 SRTT of the probed subflow
	Warmup           time.Duration // a subflow is judged only after this long …
	WarmupRTTs       float64       // … and after this many of its RTTs
	// Margin is the hysteresis of taking a subflow back: the aggregate with
	// it must exceed the threshold by this fraction, so that the noise of
	// the metric does not take a bad subflow back after every probe.
	Margin float64
	conns  map[uint32]*dtConn
	status []DynThreshConnStatus
}

type dtSubflow struct {
	firstSeen  time.Time
	best       float64 // bytes/s
	m          float64
	aside      bool
	probeUntil time.Time
	nextProbe  time.Time
	interval   time.Duration // current probe interval
	asideCount int
}

type dtConn struct {
	subflows map[SubflowID]*dtSubflow
}

// DynThreshConnStatus explains one connection.
type DynThreshConnStatus struct {
	Token         string                   `json:"token"`
	ThresholdMbit float64                  `json:"threshold_mbit"`
	SumMbit       float64                  `json:"active_sum_mbit"`
	Subflows      []DynThreshSubflowStatus `json:"subflows"`
}

// DynThreshSubflowStatus is one subflow's metric and state.
type DynThreshSubflowStatus struct {
	Subflow  string  `json:"subflow"`
	MMbit    float64 `json:"m_mbit"`
	BestMbit float64 `json:"best_mbit"`
	State    string  `json:"state"`
}

func init() {
	Register("dynthresh", func(m *yamlcfg.Map, env Env) Policy {
		d := NewDynThresh()
		d.ProbeInterval = m.Duration("probe_interval", d.ProbeInterval)
		d.MaxProbeInterval = m.Duration("max_probe_interval", d.MaxProbeInterval)
		d.ProbeWindow = m.Duration("probe_window", d.ProbeWindow)
		d.Warmup = m.Duration("warmup", d.Warmup)
		d.WarmupRTTs = m.Float("warmup_rtts", d.WarmupRTTs, 0, 1000)
		d.Margin = float64(m.Fraction("margin", units.Fraction(d.Margin)))
		if d.ProbeInterval <= 0 {
			m.Errorf("probe_interval", "must be above 0s")
		}
		if d.MaxProbeInterval < d.ProbeInterval {
			m.Errorf("max_probe_interval", "%v is below probe_interval %v", d.MaxProbeInterval, d.ProbeInterval)
		}
		return d
	})
}

// NewDynThresh makes the policy with its defaults.
func NewDynThresh() *DynThresh {
	return &DynThresh{ProbeInterval: time.Second, MaxProbeInterval: 8 * time.Second, ProbeWindow: 200 * time.Millisecond,
		Warmup: 200 * time.Millisecond, WarmupRTTs: 10, Margin: 0.1,
		conns: map[uint32]*dtConn{}}
}

// Name is "dynthresh".
func (d *DynThresh) Name() string { return "dynthresh" }

// Metric is m = cwnd·MSS/SRTT in bytes per second.
func Metric(sf observe.Subflow) float64 { return sf.ThroughputEstimate() }

// Decide runs the algorithm once per connection.
func (d *DynThresh) Decide(s *Snapshot) []Decision {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Decision
	var status []DynThreshConnStatus
	seen := map[uint32]bool{}
	for _, c := range s.Conns {
		seen[c.Token] = true
		st := d.conns[c.Token]
		if st == nil {
			st = &dtConn{subflows: map[SubflowID]*dtSubflow{}}
			d.conns[c.Token] = st
		}
		decs, cs := d.decideConn(s.Now, c, st)
		out = append(out, decs...)
		status = append(status, cs)
	}
	for tok := range d.conns {
		if !seen[tok] {
			delete(d.conns, tok)
		}
	}
	d.status = status
	return out
}

func (d *DynThresh) decideConn(now time.Time, c *Conn, st *dtConn) ([]Decision, DynThreshConnStatus) {
	cs := DynThreshConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	present := map[SubflowID]observe.Subflow{}
	for _, sf := range c.Subflows {
		id := ID(sf)
		present[id] = sf
		ds := st.subflows[id]
		if ds == nil {
			ds = &dtSubflow{firstSeen: now}
			st.subflows[id] = ds
		}
		ds.m = Metric(sf)
		probing := now.Before(ds.probeUntil)
		// A set-aside subflow's numbers are stale; only active or probing
		// subflows update their best.
		if !ds.aside || probing {
			ds.best = math.Max(ds.best, ds.m)
		}
	}
	for id := range st.subflows {
		if _, ok := present[id]; !ok {
			delete(st.subflows, id)
		}
	}

	threshold := 0.0
	for _, ds := range st.subflows {
		threshold = math.Max(threshold, ds.best)
	}
	sumActive := func() (float64, []SubflowID) {
		total := 0.0
		var ids []SubflowID
		for id, ds := range st.subflows {
			if !ds.aside {
				total += ds.m
				ids = append(ids, id)
			}
		}
		return total, ids
	}

	// Probe windows that end now: keep the subflow if the aggregate with
	// it reaches the threshold, else set it aside again.
	for _, ds := range st.subflows {
		if !ds.aside || ds.probeUntil.IsZero() || now.Before(ds.probeUntil) {
			continue
		}
		ds.probeUntil = time.Time{}
		total, _ := sumActive()
		if total+ds.m >= threshold*(1+d.Margin) {
			ds.aside = false
		} else {
			ds.interval = min(2*ds.interval, d.MaxProbeInterval)
			ds.nextProbe = now.Add(ds.interval)
		}
	}

	// The rule: aggregate below the best single subflow → set aside the
	// worst active subflow (one per round, so a single noisy sample does
	// not empty the connection). A worst subflow still in its warm-up is
	// left alone, and so is everything else: it may only be slow to start.
	total, active := sumActive()
	if total < threshold && len(active) > 1 {
		sort.Slice(active, func(i, j int) bool { return st.subflows[active[i]].m < st.subflows[active[j]].m })
		id := active[0]
		ds := st.subflows[id]
		warm := max(d.Warmup, time.Duration(d.WarmupRTTs*float64(present[id].SRTT)))
		if now.Sub(ds.firstSeen) >= warm {
			ds.aside = true
			ds.asideCount++
			ds.interval = d.ProbeInterval
			ds.nextProbe = now.Add(ds.interval)
		}
	}

	// Start probe windows that are due.
	for id, ds := range st.subflows {
		if ds.aside && ds.probeUntil.IsZero() && !now.Before(ds.nextProbe) {
			ds.probeUntil = now.Add(max(d.ProbeWindow, 2*present[id].SRTT))
		}
	}

	total, _ = sumActive()
	cs.ThresholdMbit, cs.SumMbit = threshold*8/1e6, total*8/1e6
	var out []Decision
	ids := make([]SubflowID, 0, len(st.subflows))
	for id := range st.subflows {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	for _, id := range ids {
		ds := st.subflows[id]
		state, backup := "active", false
		reason := fmt.Sprintf("active: m %s, aggregate %s vs threshold %s", mbit(ds.m), mbit(total), mbit(threshold))
		switch {
		case ds.aside && !ds.probeUntil.IsZero():
			state = "probing"
			reason = fmt.Sprintf("set aside, probe window for %s (m %s)", fmtMs(ds.probeUntil.Sub(now)), mbit(ds.m))
		case ds.aside:
			state, backup = "set-aside", true
			reason = fmt.Sprintf("set aside: aggregate fell below the best single subflow %s; next probe in %s", mbit(threshold), fmtMs(ds.nextProbe.Sub(now)))
		}
		out = append(out, Decision{Token: c.Token, Subflow: id, Backup: backup, Reason: reason})
		cs.Subflows = append(cs.Subflows, DynThreshSubflowStatus{Subflow: id.String(), MMbit: ds.m * 8 / 1e6, BestMbit: ds.best * 8 / 1e6, State: state})
	}
	return out, cs
}

// Status reports the last round.
func (d *DynThresh) Status() any {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.status
}
