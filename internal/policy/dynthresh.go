package policy

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// DynThresh is the extended dynamic threshold scheduler (paper:
// asymmetric-subflows-dynamic-threshold). Per subflow, m = cwnd·MSS/SRTT
// and its best recorded value; the threshold is the best single-subflow
// value recorded. When the sum of m over the active subflows falls below
// it, the worst active subflow is set aside (made backup). A set-aside
// subflow gets a short transmit window every ProbeInterval so its metrics
// stay fresh, and it returns when the sum with it reaches the threshold
// again.
type DynThresh struct {
	mu            sync.Mutex
	ProbeInterval time.Duration
	ProbeWindow   time.Duration // at least 2 SRTT of the probed subflow
	Warmup        time.Duration // a subflow is judged only after this long …
	WarmupRTTs    float64       // … and after this many of its RTTs
	conns         map[uint32]*dtConn
	status        []DynThreshConnStatus
}

type dtSubflow struct {
	firstSeen  time.Time
	best       float64 // bytes/s
	m          float64
	aside      bool
	probeUntil time.Time
	nextProbe  time.Time
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
		d.ProbeWindow = m.Duration("probe_window", d.ProbeWindow)
		d.Warmup = m.Duration("warmup", d.Warmup)
		d.WarmupRTTs = m.Float("warmup_rtts", d.WarmupRTTs, 0, 1000)
		if d.ProbeInterval <= 0 {
			m.Errorf("probe_interval", "must be above 0s")
		}
		return d
	})
}

// NewDynThresh makes the policy with its defaults.
func NewDynThresh() *DynThresh {
	return &DynThresh{ProbeInterval: time.Second, ProbeWindow: 200 * time.Millisecond, Warmup: time.Second, WarmupRTTs: 10,
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
		if total+ds.m >= threshold {
			ds.aside = false
		} else {
			ds.nextProbe = now.Add(d.ProbeInterval)
		}
	}

	// The rule: aggregate below the best single subflow → set aside the
	// worst active subflow that is past its warm-up (one per round, so a
	// single noisy sample does not empty the connection).
	total, active := sumActive()
	if total < threshold && len(active) > 1 {
		sort.Slice(active, func(i, j int) bool { return st.subflows[active[i]].m < st.subflows[active[j]].m })
		for _, id := range active {
			ds := st.subflows[id]
			sf := present[id]
			warm := max(d.Warmup, time.Duration(d.WarmupRTTs*float64(sf.SRTT)))
			if now.Sub(ds.firstSeen) < warm {
				continue
			}
			ds.aside = true
			ds.asideCount++
			ds.nextProbe = now.Add(d.ProbeInterval)
			break
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
