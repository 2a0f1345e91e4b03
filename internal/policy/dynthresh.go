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
// asymmetric-subflows-dynamic-threshold). The threshold is the best
// single-subflow throughput recorded; when the connection's aggregate
// falls below it, the worst subflow is set aside, i.e. made backup. A set-aside subflow gets a
// short transmit window every probe interval so its numbers stay fresh,
// and returns when the aggregate with it beats the threshold again.
//
// Throughput is measured, not estimated (Metric "measured", the default):
// bytes acknowledged per second over a short window, per subflow for the
// threshold and at the connection level (MPTCP DATA_ACKs: data the
// receiver could use in order) for the aggregate. The paper's estimate m
// swings threefold between samples under BBR, and a sum of estimates
// cannot see head-of-line blocking, which is what a bad path does to the
// good one. Metric "estimate" runs the paper's rule literally (aggregate
// = Σm, threshold = best m, worst = lowest m) for comparison.
//
// The aggregate must fall below the threshold by a margin before anything
// is set aside, and beat it by the margin for a probed subflow to come
// back (see Margin).
//
// Each probe costs the connection a little (data sent on the bad path
// arrives late), so the interval doubles after every failed probe, up to
// MaxProbeInterval, and starts again at ProbeInterval when the subflow
// comes back. The initial subflow is not judged during its warm-up
// (WarmupRTTs of its RTT): a far path needs many RTTs to show its worth.
//
// Mode "plain" is the paper's dynamic threshold before its extension
// (its Algorithm 3, Fig. 17): the same rule without the probes (the
// extension's timer, Algorithm 4, Fig. 18), so a subflow set aside is
// never tried again and cannot come back when its path recovers.
type DynThresh struct {
	mu sync.Mutex
	// Mode: "shaped" (the default, see decideShaped), "paper" (the paper's
	// extended dynamic threshold, improved as described above) or "plain"
	// (the paper's dynamic threshold before its extension: the same rule
	// without probes, so a subflow set aside stays aside).
	Mode string
	// The keys of the threshold modes (paper and plain), and the paper
	// mode's probes.
	DynThreshConfig
	DynThreshProbeConfig
	conns  map[uint32]*dtConn
	status []DynThreshConnStatus
	// The shaped mode's state.
	sh           shaper
	shapedStatus []ShapeConnStatus
}

// DynThreshConfig is what the threshold modes (paper and plain) read of
// their config entry.
type DynThreshConfig struct {
	// Metric: "measured" (bytes acknowledged per second) or "estimate"
	// (the paper's m = cwnd·MSS/SRTT).
	Metric string `yaml:"metric" enum:"measured,estimate"`
	// Window is what measured rates are measured over.
	Window time.Duration `yaml:"window" above:"0s"`
	// Warmup is a joined subflow's grace; the initial subflow's is
	// WarmupRTTs of its RTT (at least Warmup).
	Warmup     time.Duration `yaml:"warmup"`
	WarmupRTTs float64       `yaml:"warmup_rtts" min:"0" max:"1000"`
	// Margin is the hysteresis, both ways: a subflow is set aside when the
	// aggregate falls below the threshold by this fraction, and taken back
	// when the aggregate during its probe beats the threshold by it.
	// Throughput measured over a window is noisy (ACKs come in bursts):
	// without a margin, noise alone would decide.
	Margin units.Fraction `yaml:"margin"`
}

// DynThreshProbeConfig is the paper mode's probes: a set-aside subflow is
// usable again for ProbeWindow (at least one SRTT of it) every
// ProbeInterval, doubling after every failed probe up to
// MaxProbeInterval.
type DynThreshProbeConfig struct {
	ProbeInterval    time.Duration `yaml:"probe_interval" above:"0s"`
	MaxProbeInterval time.Duration `yaml:"max_probe_interval"`
	ProbeWindow      time.Duration `yaml:"probe_window"`
}

// The modes of dynthresh.
const (
	dtShaped = "shaped"
	dtPaper  = "paper"
	dtPlain  = "plain"
)

type dtSubflow struct {
	firstSeen  time.Time
	initial    bool
	m          float64 // cwnd·MSS/SRTT, bytes/s
	r          float64 // measured, bytes/s
	rate       rate
	best       float64 // best throughput recorded (per Metric)
	aside      bool
	probeUntil time.Time
	probeStart time.Time
	probeBytes uint64
	nextProbe  time.Time
	interval   time.Duration
	asides     int
}

type dtConn struct {
	subflows map[SubflowID]*dtSubflow
	agg      rate
	lastAgg  float64
	bytes    uint64
}

// DynThreshConnStatus explains one connection.
type DynThreshConnStatus struct {
	Token         string                   `json:"token"`
	ThresholdMbit float64                  `json:"threshold_mbit"`
	AggregateMbit float64                  `json:"aggregate_mbit"`
	Subflows      []DynThreshSubflowStatus `json:"subflows"`
}

// DynThreshSubflowStatus is one subflow's numbers and state.
type DynThreshSubflowStatus struct {
	Subflow  string  `json:"subflow"`
	MMbit    float64 `json:"m_mbit"`
	RateMbit float64 `json:"measured_mbit"`
	BestMbit float64 `json:"best_mbit"`
	State    string  `json:"state"`
	SetAside int     `json:"times_set_aside"`
}

func buildDynThresh(m *yamlcfg.Map, env Env) Policy {
	d := NewDynThresh()
	d.Mode = m.Enum("mode", d.Mode, dtShaped, dtPaper, dtPlain)
	decodeMode(m, "dynthresh", "mode", d.Mode, !m.Has("mode"), []configMode{
		{dtShaped, []any{&d.sh.ShaperConfig}},
		{dtPaper, []any{&d.DynThreshConfig, &d.DynThreshProbeConfig}},
		{dtPlain, []any{&d.DynThreshConfig}},
	})
	if d.Mode == dtPaper && d.MaxProbeInterval < d.ProbeInterval && !m.Failed("probe_interval") {
		m.Errorf("max_probe_interval", "%v is below probe_interval %v", d.MaxProbeInterval, d.ProbeInterval)
	}
	return d
}

// NewDynThresh makes the policy with its defaults.
func NewDynThresh() *DynThresh {
	d := &DynThresh{Mode: dtShaped,
		DynThreshConfig: DynThreshConfig{Metric: "measured", Window: time.Second, Warmup: 200 * time.Millisecond,
			WarmupRTTs: 10, Margin: 0.1},
		DynThreshProbeConfig: DynThreshProbeConfig{ProbeInterval: time.Second, MaxProbeInterval: 8 * time.Second,
			ProbeWindow: 300 * time.Millisecond},
		conns: map[uint32]*dtConn{}, sh: newShaper()}
	// (Its Table 1 figures were measured without the in-time gate and the
	// ProbeRTT pause and rest.)
	d.sh.InTimeGate, d.sh.ProbeRTTPause, d.sh.ProbeRTTRest = false, false, false
	return d
}

// Requirements: in the shaped mode, the shaper's.
func (d *DynThresh) Requirements() Requirements {
	if d.Mode == dtShaped {
		return d.sh.requirements()
	}
	return Requirements{}
}

// Name is "dynthresh".
func (d *DynThresh) Name() string { return "dynthresh" }

// Metric is the paper's m = cwnd·MSS/SRTT in bytes per second.
func Metric(sf observe.Subflow) float64 { return sf.ThroughputEstimate() }

// Decide runs the algorithm once per connection.
func (d *DynThresh) Decide(s *Snapshot) []Action {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Mode == dtShaped {
		return d.decideAllShaped(s)
	}
	var out []Action
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

func (d *DynThresh) estimate() bool { return d.Metric == "estimate" }

func (d *DynThresh) decideConn(now time.Time, c *Conn, st *dtConn) ([]Action, DynThreshConnStatus) {
	cs := DynThreshConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	present := map[SubflowID]observe.Subflow{}
	var sumM, sumR float64
	for _, sf := range c.Subflows {
		id := ID(sf)
		present[id] = sf
		ds := st.subflows[id]
		if ds == nil {
			ds = &dtSubflow{firstSeen: now, initial: sf.LocalID == 0}
			st.subflows[id] = ds
		}
		ds.m = Metric(sf)
		ds.r = ds.rate.add(now, sf.BytesAcked, d.Window)
		v := ds.r
		if d.estimate() {
			v = ds.m
		}
		// A set-aside subflow's numbers are stale; only active or probing
		// subflows record their best.
		if !ds.aside || !ds.probeUntil.IsZero() {
			ds.best = math.Max(ds.best, v)
		}
		if !ds.aside {
			sumM += ds.m
			sumR += ds.r
		}
	}
	for id := range st.subflows {
		if _, ok := present[id]; !ok {
			delete(st.subflows, id)
		}
	}
	// The aggregate: what the connection delivers in order (measured), or
	// the sum of the active subflows' estimates (the paper's).
	agg := sumM
	if !d.estimate() {
		if c.BytesAcked > 0 || st.bytes > 0 {
			agg = st.agg.add(now, c.BytesAcked, d.Window)
		} else {
			agg = sumR // no connection-level counter: fall back to the subflows'
		}
	}
	st.bytes, st.lastAgg = c.BytesAcked, agg
	threshold := 0.0
	for _, ds := range st.subflows {
		threshold = math.Max(threshold, ds.best)
	}

	// Probe windows that end now: the subflow stays if the aggregate during
	// the window beat the threshold, else it is set aside again, and the
	// next probe waits twice as long.
	for _, ds := range st.subflows {
		if !ds.aside || ds.probeUntil.IsZero() || now.Before(ds.probeUntil) {
			continue
		}
		during := agg
		if !d.estimate() && now.After(ds.probeStart) && c.BytesAcked >= ds.probeBytes {
			during = float64(c.BytesAcked-ds.probeBytes) / now.Sub(ds.probeStart).Seconds()
		}
		if d.estimate() {
			during = sumM + ds.m
		}
		ds.probeUntil = time.Time{}
		// Kickback: the connection with the subflow beats the best single
		// subflow (by the margin).
		if during >= threshold*(1+float64(d.Margin)) {
			ds.aside = false
		} else {
			ds.interval = max(min(2*ds.interval, d.MaxProbeInterval), ds.interval)
			ds.nextProbe = now.Add(ds.interval)
		}
	}

	// The rule: aggregate below the best single subflow → set aside the
	// worst active subflow, one per round so that a single bad sample does
	// not empty the connection. Only the worst is a candidate, with one
	// exception: an initial subflow in its warm-up (a far path needs many
	// RTTs to show its worth) passes the turn to the next worst. A joined
	// subflow in its short warm-up, or one that is clearly the best path
	// (its best beats every other's by a quarter), ends the round.
	var active []SubflowID
	for id, ds := range st.subflows {
		if !ds.aside {
			active = append(active, id)
		}
	}
	if agg < threshold*(1-float64(d.Margin)) && len(active) > 1 {
		sort.Slice(active, func(i, j int) bool { return d.worse(st.subflows[active[i]], st.subflows[active[j]]) })
		for _, id := range active {
			ds := st.subflows[id]
			age := now.Sub(ds.firstSeen)
			if ds.initial && age < max(d.Warmup, time.Duration(d.WarmupRTTs*float64(present[id].SRTT))) {
				continue
			}
			if age < d.Warmup || d.clearlyBest(ds, st, active) {
				break
			}
			ds.aside = true
			ds.asides++
			if d.Mode == dtPlain {
				break // for good: the plain rule never tries it again
			}
			// A probe stalls the connection for about an RTT of its slowest
			// remaining path: probe no more often than every 10 of those.
			var rtt time.Duration
			for _, o := range active {
				if o != id {
					rtt = max(rtt, present[o].SRTT)
				}
			}
			ds.interval = max(d.ProbeInterval, 10*rtt)
			ds.nextProbe = now.Add(ds.interval)
			break
		}
	}

	// Start probe windows that are due (the paper mode's extension; the
	// plain rule has none).
	for id, ds := range st.subflows {
		if d.Mode == dtPaper && ds.aside && ds.probeUntil.IsZero() && !now.Before(ds.nextProbe) {
			ds.probeStart, ds.probeBytes = now, c.BytesAcked
			// Long enough for an ACK to return, never long: on a far path
			// every probe costs a head-of-line stall.
			ds.probeUntil = now.Add(min(max(d.ProbeWindow, present[id].SRTT), 2*time.Second))
		}
	}

	cs.ThresholdMbit, cs.AggregateMbit = threshold*8/1e6, agg*8/1e6
	var out []Action
	ids := make([]SubflowID, 0, len(st.subflows))
	for id := range st.subflows {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i].String() < ids[j].String() })
	for _, id := range ids {
		ds := st.subflows[id]
		state, backup := "active", false
		reason := fmt.Sprintf("active: aggregate %s vs threshold %s", mbit(agg), mbit(threshold))
		switch {
		case ds.aside && !ds.probeUntil.IsZero():
			state = "probing"
			reason = fmt.Sprintf("set aside; probe window for %s", fmtMs(ds.probeUntil.Sub(now)))
		case ds.aside && d.Mode == dtPlain:
			state, backup = "set-aside", true
			reason = fmt.Sprintf("set aside for good: the aggregate fell below the best single subflow %s (the plain rule never tries it again)", mbit(threshold))
		case ds.aside:
			state, backup = "set-aside", true
			reason = fmt.Sprintf("set aside: aggregate below the best single subflow %s; next probe in %s", mbit(threshold), fmtMs(ds.nextProbe.Sub(now)))
		}
		out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: id, Backup: backup, Reason: reason})
		cs.Subflows = append(cs.Subflows, DynThreshSubflowStatus{Subflow: id.String(), MMbit: ds.m * 8 / 1e6,
			RateMbit: ds.r * 8 / 1e6, BestMbit: ds.best * 8 / 1e6, State: state, SetAside: ds.asides})
	}
	return out, cs
}

// clearlyBest reports whether ds has shown clearly more than every other
// active subflow: setting it aside would contradict the threshold it sets.
func (d *DynThresh) clearlyBest(ds *dtSubflow, st *dtConn, active []SubflowID) bool {
	for _, id := range active {
		o := st.subflows[id]
		if o != ds && capacity(ds) <= 1.25*capacity(o) {
			return false
		}
	}
	return true
}

// capacity is the evidence of what a subflow can carry: the best it has
// delivered, or the paper's m = cwnd·MSS/SRTT if that is higher. m runs
// ahead of delivery while a far path is still ramping up, which keeps a
// near but slow path from looking like the better one for seconds.
func capacity(ds *dtSubflow) float64 { return math.Max(ds.best, ds.m) }

// worse orders subflows worst first. The paper ranks by m, but m is
// misleading on its own exactly when it matters: a path starved by
// head-of-line blocking goes idle and the kernel shrinks its cwnd after
// idle, so the good path looks worst. Here a subflow is worse when its
// capacity (the best it delivered, or m if higher) is clearly lower (by a
// fifth); between similar subflows, the one doing worse right now (a
// flooded path) is.
func (d *DynThresh) worse(a, b *dtSubflow) bool {
	if d.estimate() {
		return a.m < b.m
	}
	ca, cb := capacity(a), capacity(b)
	switch {
	case ca < 0.8*cb:
		return true
	case cb < 0.8*ca:
		return false
	}
	return a.r < b.r
}

// Status reports the last round.
func (d *DynThresh) Status() any {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Mode == dtShaped {
		return d.shapedStatus
	}
	return d.status
}
