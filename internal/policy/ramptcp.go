package policy

import (
	"fmt"
	"regexp"
	"slices"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// RAMPTCP is receiver-assisted MPTCP (paper: ramptcp-edge-clouds): the
// data's receiver reports, in a TCP option on its ACKs over every subflow,
// what it sees of each path — loss indications at the transport level and
// the health of its own last hop (radio, or the lab's emulated link) — and
// the sender marks a path inactive (backup) when its report crosses a
// threshold, so new data stops going where the receiver's last hop loses
// it, long before the sender's own SRTT would show it.
//
// The transport's loss indications cannot tell a failing last hop from
// congestion (a queue that overflows drops packets too): when the
// receiver's last hop is known to be healthy, they do not count, and they
// do not count during a path's first Warmup (slow start overshoots the
// bottleneck's queue).
//
// Hysteresis, as the paper asks: a path goes inactive when its loss
// reaches LossHigh (or its last hop's health falls to HealthLow) and comes
// back only after Hold, and only if a probe (the path usable again for
// ProbeWindow) brings reports at or below LossLow (and last-hop health at
// or above HealthHigh). A failed probe doubles the hold, up to MaxHold, so
// intermittent loss cannot make it flap. While the receiver's last hop is
// known to be bad (a radio keeps reporting while idle), no probe is spent.
//
// Worth its loss: whether a lossy path hurts depends on the sender's
// congestion control. A loss-based one (Reno, CUBIC) collapses on a
// randomly lossy path and its holes hold up the connection: such a path
// goes inactive at once. A rate-based one (BBR, WorthCC) keeps it
// delivering, and setting it aside would cost its share: such a path,
// when its report turns bad, is judged in use for WorthTrial first, and
// kept in use despite its loss ("tolerated") if the connection delivers
// in order WorthGain more than its other paths do on their own; it goes
// inactive when it did not, or later when the connection delivers less
// than the others alone, and is simply active again once its reports
// have been good for a hold. A path that failed its trial has up to
// WorthTrials in all while its reports stay bad, each after its hold and
// twice as long as the one before: one short trial right after a path
// turns lossy is noisy.
//
// Never below single-path TCP over the better path: a connection always
// keeps at least one path active (the healthiest), and without reports
// (a peer that does not send them, a middlebox that strips them) the
// policy has no opinion and the kernel's default applies.
//
// Signal "sender" runs the same rule on what the sender sees alone (its
// subflows' retransmissions per segment sent over Window), for comparison.
type RAMPTCP struct {
	mu     sync.Mutex
	Signal string // reports (default) or sender
	// The keys of both signals, and of each.
	RAMPTCPConfig
	RAMPTCPReportsConfig
	RAMPTCPSenderConfig

	conns  map[uint32]*rampConn
	status []RAMPTCPConnStatus
}

// RAMPTCPConfig is what ramptcp reads of its config entry whichever its
// signal.
type RAMPTCPConfig struct {
	LossHigh    units.Fraction `yaml:"loss_high"`
	LossLow     units.Fraction `yaml:"loss_low"`
	Hold        time.Duration  `yaml:"hold" above:"0s"`
	MaxHold     time.Duration  `yaml:"max_hold"`
	ProbeWindow time.Duration  `yaml:"probe_window" above:"0s"`
	// Warmup: a path's transport loss does not count this long after it
	// appears.
	Warmup time.Duration `yaml:"warmup"`
	// NotSentLowat bounds the unsent data MPTCP queues on each subflow
	// (Requirements.NotSentLowat): what is queued on a path when it is set
	// inactive still leaves over it, at its failing rate, while the
	// receiver waits for it. 0 leaves the kernel's default.
	NotSentLowat units.Size `yaml:"notsent_lowat" min:"0B" max:"1GiB"`
	// NotSentLowatExcept: congestion controls whose subflows keep the
	// kernel's unbounded queue. A rate-based one (BBR) keeps its rate on a
	// lossy path, so what a path set aside holds leaves in a few round
	// trips; and the bound costs there: in ramptcp-loss-bbr the bound
	// alone delivered less than default MPTCP in every paired run
	// (results.md).
	NotSentLowatExcept []string `yaml:"notsent_lowat_except"`
	// WorthTrial: a path whose subflows run a congestion control of
	// WorthCC is judged in use this long when its report turns bad, and
	// kept in use despite its loss if the connection delivers in order
	// WorthGain more than its other paths do on their own. 0 sets it
	// aside at once. It needs the connection's in-order delivery
	// (DATA_ACKs), which the kernel gives from 6.5 on.
	WorthTrial time.Duration  `yaml:"worth_trial"`
	WorthGain  units.Fraction `yaml:"worth_gain"`
	// WorthTrials: how many trials a path has while its reports stay
	// bad; after a failed one, the next comes at the end of its hold,
	// twice as long (300 ms, 600 ms, 1.2 s by default).
	WorthTrials int `yaml:"worth_trials" min:"1" max:"10"`
	// WorthCC: the congestion controls that keep a randomly lossy path
	// delivering; under a loss-based one (Reno, CUBIC) such a path
	// collapses and a trial only holds the connection up. Empty: any.
	WorthCC []string `yaml:"worth_cc"`
}

// RAMPTCPReportsConfig is what the reports signal (the default) reads
// besides: the receiver's last hop, and how long a report says anything.
type RAMPTCPReportsConfig struct {
	HealthLow  units.Fraction `yaml:"health_low"`
	HealthHigh units.Fraction `yaml:"health_high"`
	// Stale: a report older than this says nothing; when no path of a
	// connection has a fresh one, the policy lets go of it.
	Stale time.Duration `yaml:"stale" above:"0s"`
}

// RAMPTCPSenderConfig is what the sender signal reads besides:
// retransmissions per segment sent over Window, known from MinSegments
// segments on.
type RAMPTCPSenderConfig struct {
	Window      time.Duration `yaml:"window" above:"0s"`
	MinSegments int           `yaml:"min_segments" min:"1" max:"100000"`
}

// The signals of ramptcp.
const (
	rampReports = "reports"
	rampSender  = "sender"
)

type rampKey struct{ local, remote uint8 }

type rampPath struct {
	born          time.Time
	state         string // active, trial, tolerated, inactive, probing
	since         time.Time
	hold          time.Duration
	probeStart    time.Time
	probeUntil    time.Time
	inactivations int
	probes        int
	why           string
	lastInactive  time.Time
	// The worth check (WorthTrial): how many trials the path had since it
	// was last active with good reports (WorthTrials: no more), and what
	// the connection delivered in order and its other paths on their own
	// over the last trial, or the last rampToleratedWindow while
	// tolerated (bytes/s).
	worthTrials  int
	with, others float64
	// goodSince: since when a tolerated path's reports have been good.
	goodSince time.Time
}

// inactivate sets the path aside (backup) from now, counted in its
// status, for why; its hold is the caller's to set first.
func (ps *rampPath) inactivate(now time.Time, why string) {
	ps.state, ps.since = "inactive", now
	ps.inactivations++
	ps.lastInactive = now
	ps.why = why
}

// activate puts the path back in use from now, its hold and its trials
// reset (a path is tried for its worth afresh once it has been good), for
// why.
func (ps *rampPath) activate(now time.Time, hold time.Duration, why string) {
	ps.state, ps.since, ps.hold, ps.worthTrials = "active", now, hold, 0
	ps.why = why
}

type rampConn struct {
	paths map[rampKey]*rampPath
	// acked: the connection's in-order delivery (DATA_ACKed bytes) and
	// each path's own (its subflows' TCP-level acknowledged bytes), as
	// sampled over the last few seconds while a path is judged (see
	// judging), for the worth check.
	acked []ackSample
	// sender signal: per subflow samples
	sent map[SubflowID]*rampSamples
}

type ackSample struct {
	at    time.Time
	conn  uint64
	paths map[rampKey]uint64
}

// rampSettle: what a change of paths takes to show in the connection's
// delivery (a round of the daemon, a few RTTs of the lab's paths); a
// trial is judged from this long after it began.
const rampSettle = 100 * time.Millisecond

// rampBusy: a connection with less than this unacknowledged (sent, not
// DATA_ACKed) has too little to send to show what a path is worth (an
// idle control connection): it gets no worth trial.
const rampBusy = 64 << 10

// judging reports whether a path of the connection is on trial or
// tolerated: only then is its delivery sampled (a trial is judged on
// samples taken after it began, a tolerated path on the last
// rampToleratedWindow of them, all taken while it was tolerated or on
// trial).
func (st *rampConn) judging() bool {
	for _, ps := range st.paths {
		if ps.state == "trial" || ps.state == "tolerated" {
			return true
		}
	}
	return false
}

// record keeps the connection's delivery, and its paths', sampled at `at`.
func (st *rampConn) record(at time.Time, c *Conn) {
	if c.BytesAcked == 0 || at.IsZero() {
		return
	}
	if n := len(st.acked); n > 0 && !at.After(st.acked[n-1].at) {
		return
	}
	a := ackSample{at: at, conn: c.BytesAcked, paths: map[rampKey]uint64{}}
	for _, sf := range c.Subflows {
		a.paths[rampKey{sf.LocalID, sf.RemoteID}] += sf.BytesAcked
	}
	st.acked = append(st.acked, a)
	i := 0
	for i < len(st.acked) && at.Sub(st.acked[i].at) > rampToleratedWindow+time.Second {
		i++
	}
	st.acked = st.acked[i:]
}

// delivered gives, between the first sample at or after from and the
// last one, the rate (bytes/s) at which the connection delivered in order
// and at which its paths other than k delivered on their own; false when
// no two samples are in that span, or a path's count went back (a
// subflow replaced).
func (st *rampConn) delivered(from time.Time, k rampKey) (conn, others float64, ok bool) {
	n := len(st.acked)
	if n < 2 {
		return 0, 0, false
	}
	last := st.acked[n-1]
	for _, a := range st.acked {
		if a.at.Before(from) {
			continue
		}
		dt := last.at.Sub(a.at).Seconds()
		if dt <= 0 || last.conn < a.conn {
			return 0, 0, false
		}
		var o uint64
		for p, b := range last.paths {
			if p == k {
				continue
			}
			if b < a.paths[p] {
				return 0, 0, false
			}
			o += b - a.paths[p]
		}
		return float64(last.conn-a.conn) / dt, float64(o) / dt, true
	}
	return 0, 0, false
}

type rampSamples struct {
	at      []time.Time
	retrans []uint32
	segs    []float64
}

// RAMPTCPConnStatus explains one connection.
type RAMPTCPConnStatus struct {
	Token string              `json:"token"`
	Paths []RAMPTCPPathStatus `json:"paths"`
}

// RAMPTCPPathStatus is one path's report and state.
type RAMPTCPPathStatus struct {
	Path          string   `json:"path"` // "local id→remote id"
	Subflows      []string `json:"subflows"`
	State         string   `json:"state"` // active, trial, tolerated, inactive, probing
	LossPct       *float64 `json:"loss_pct,omitempty"`
	LastHopPct    *float64 `json:"last_hop_pct,omitempty"`
	ReportAgeMs   *float64 `json:"report_age_ms,omitempty"`
	Reports       uint32   `json:"reports"`
	HoldMs        float64  `json:"hold_ms"`
	Inactivations int      `json:"times_inactive"`
	Probes        int      `json:"probes"`
	LastInactive  string   `json:"last_inactive,omitempty"`
	Reason        string   `json:"reason"`
	// WithMbit and OthersMbit: what the connection delivered in order and
	// its other paths on their own, over the path's worth trial (or the
	// last 3 s while it is tolerated).
	WithMbit   *float64 `json:"with_mbit,omitempty"`
	OthersMbit *float64 `json:"others_mbit,omitempty"`
}

func buildRAMPTCP(m *yamlcfg.Map, env Env) Policy {
	r := NewRAMPTCP()
	r.Signal = m.Enum("signal", r.Signal, rampReports, rampSender)
	decodeMode(m, "ramptcp", "signal", r.Signal, !m.Has("signal"), []configMode{
		{rampReports, []any{&r.RAMPTCPConfig, &r.RAMPTCPReportsConfig}},
		{rampSender, []any{&r.RAMPTCPConfig, &r.RAMPTCPSenderConfig}},
	})
	if r.LossLow > r.LossHigh {
		m.Errorf("loss_low", "%v is above loss_high %v (the hysteresis needs low ≤ high)", r.LossLow, r.LossHigh)
	}
	if r.Signal == rampReports && r.HealthLow > r.HealthHigh {
		m.Errorf("health_low", "%v is above health_high %v", r.HealthLow, r.HealthHigh)
	}
	if r.MaxHold < r.Hold && !m.Failed("hold") {
		m.Errorf("max_hold", "%v is below hold %v", r.MaxHold, r.Hold)
	}
	if err := checkCCNames(r.NotSentLowatExcept); err != nil && !m.Failed("notsent_lowat_except") {
		m.Errorf("notsent_lowat_except", "%v", err)
	}
	return r
}

// MaxLowatExcept is how many congestion controls a notsent_lowat can
// except (the sockops programs' list holds this many).
const MaxLowatExcept = 4

// ccNameRE: a congestion control's name as the kernel takes it
// (TCP_CA_NAME_MAX is 16 with the NUL).
var ccNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,15}$`)

// checkCCNames says what is wrong with a list of congestion controls to
// except from notsent_lowat.
func checkCCNames(names []string) error {
	if len(names) > MaxLowatExcept {
		return fmt.Errorf("%d congestion controls; at most %d", len(names), MaxLowatExcept)
	}
	for _, n := range names {
		if !ccNameRE.MatchString(n) {
			return fmt.Errorf("%q is not a congestion control's name (1 to 15 letters, digits, _ or -, as in net.ipv4.tcp_congestion_control)", n)
		}
	}
	return nil
}

// NewRAMPTCP makes the policy with its defaults.
func NewRAMPTCP() *RAMPTCP {
	return &RAMPTCP{Signal: rampReports,
		RAMPTCPConfig: RAMPTCPConfig{LossHigh: 0.10, LossLow: 0.02, Hold: time.Second, MaxHold: 8 * time.Second,
			ProbeWindow: 300 * time.Millisecond, Warmup: time.Second, NotSentLowat: units.Size(64 << 10),
			NotSentLowatExcept: []string{"bbr"},
			WorthTrial:         300 * time.Millisecond, WorthGain: 0.15, WorthTrials: 3, WorthCC: []string{"bbr"}},
		RAMPTCPReportsConfig: RAMPTCPReportsConfig{HealthLow: 0.90, HealthHigh: 0.97, Stale: time.Second},
		RAMPTCPSenderConfig:  RAMPTCPSenderConfig{Window: 100 * time.Millisecond, MinSegments: 16},
		conns:                map[uint32]*rampConn{}}
}

// Name is "ramptcp".
func (r *RAMPTCP) Name() string { return "ramptcp" }

// Requirements: the peer's reports must be read.
func (r *RAMPTCP) Requirements() Requirements {
	return Requirements{HealthReports: r.Signal == rampReports, NotSentLowat: int(r.NotSentLowat),
		NotSentLowatExcept: r.NotSentLowatExcept}
}

// Decide runs the rule for every connection.
func (r *RAMPTCP) Decide(s *Snapshot) []Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Action
	var status []RAMPTCPConnStatus
	seen := map[uint32]bool{}
	for _, c := range s.Conns {
		seen[c.Token] = true
		st := r.conns[c.Token]
		if st == nil {
			st = &rampConn{paths: map[rampKey]*rampPath{}, sent: map[SubflowID]*rampSamples{}}
			r.conns[c.Token] = st
		}
		if st.judging() {
			sampled := s.Sampled
			if sampled.IsZero() {
				sampled = s.Now
			}
			st.record(sampled, c)
		} else {
			st.acked = nil
		}
		acts, cs := r.decideConn(s.Now, c, st)
		out = append(out, acts...)
		if cs != nil {
			status = append(status, *cs)
		}
	}
	for tok := range r.conns {
		if !seen[tok] {
			delete(r.conns, tok)
		}
	}
	r.status = status
	return out
}

// senderHealth is the sender signal: retransmissions per segment sent
// over the window, per subflow.
func (r *RAMPTCP) senderHealth(now time.Time, c *Conn, st *rampConn) {
	live := map[SubflowID]bool{}
	c.Health = nil
	for _, sf := range c.Subflows {
		id := ID(sf)
		live[id] = true
		w := st.sent[id]
		if w == nil {
			w = &rampSamples{}
			st.sent[id] = w
		}
		mss := float64(max(sf.MSS, 536))
		w.at = append(w.at, now)
		w.retrans = append(w.retrans, sf.TotalRetrans)
		w.segs = append(w.segs, float64(sf.BytesSent)/mss)
		i := 0
		for i < len(w.at)-1 && now.Sub(w.at[i+1]) >= r.Window {
			i++
		}
		w.at, w.retrans, w.segs = w.at[i:], w.retrans[i:], w.segs[i:]
		h := PathHealth{LocalID: sf.LocalID, RemoteID: sf.RemoteID, Received: now, Reports: 1}
		if n := len(w.at); n > 1 {
			segs := w.segs[n-1] - w.segs[0]
			if segs >= float64(r.MinSegments) {
				h.Loss, h.LossKnown = min(float64(w.retrans[n-1]-w.retrans[0])/segs, 1), true
			}
		}
		c.Health = append(c.Health, h)
	}
	for id := range st.sent {
		if !live[id] {
			delete(st.sent, id)
		}
	}
}

// judge tells whether a report says the path is bad, or good enough to
// come back; neither when it says nothing (an idle path, no last hop).
func (r *RAMPTCP) judge(h PathHealth, warm bool) (bad, good bool) {
	lossBad := h.LossKnown && h.Loss >= float64(r.LossHigh) && warm && !(h.LastHopKnown && h.LastHop >= float64(r.HealthHigh))
	bad = lossBad || (h.LastHopKnown && h.LastHop <= float64(r.HealthLow))
	good = (h.LossKnown || h.LastHopKnown) && (!h.LossKnown || h.Loss <= float64(r.LossLow)) &&
		(!h.LastHopKnown || h.LastHop >= float64(r.HealthHigh))
	return bad, good
}

func describe(h PathHealth, fresh bool, now time.Time) string {
	if !fresh {
		return "no fresh report"
	}
	s := "loss ?"
	if h.LossKnown {
		s = fmt.Sprintf("loss %.1f%%", 100*h.Loss)
	}
	if h.LastHopKnown {
		s += fmt.Sprintf(", last hop %.1f%%", 100*h.LastHop)
	}
	return s + fmt.Sprintf(" (%s ago)", fmtMs(now.Sub(h.Received)))
}

func (r *RAMPTCP) decideConn(now time.Time, c *Conn, st *rampConn) ([]Action, *RAMPTCPConnStatus) {
	if r.Signal == rampSender {
		cc := *c
		c = &cc
		r.senderHealth(now, c, st)
	}
	fresh := func(h PathHealth) bool { return !h.Received.IsZero() && now.Sub(h.Received) <= r.Stale }
	anyFresh := false
	for _, h := range c.Health {
		anyFresh = anyFresh || fresh(h)
	}
	var out []Action
	if !anyFresh {
		if len(st.paths) == 0 {
			return nil, nil // never heard a report: no opinion
		}
		// No fresh report. While nothing at all comes back (the connection
		// is stalled or idle) there is nothing to learn: the paths keep
		// their state. When ACKs keep coming without reports (the peer
		// stopped sending them, or something strips them), fail open, once,
		// and forget.
		acked := false
		for _, sf := range c.Subflows {
			acked = acked || sf.LastAckRecv < r.Stale
		}
		if !acked {
			cs := &RAMPTCPConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
			for _, sf := range c.Subflows {
				if ps := st.paths[rampKey{sf.LocalID, sf.RemoteID}]; ps != nil {
					out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: ps.state == "inactive",
						Reason: "no ACK for " + r.Stale.String() + ": kept as it was (" + ps.why + ")"})
				}
			}
			return out, cs
		}
		for _, sf := range c.Subflows {
			out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: false,
				Reason: fmt.Sprintf("no report from the peer for %s: the kernel's default", r.Stale)})
		}
		st.paths = map[rampKey]*rampPath{}
		return out, &RAMPTCPConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	}

	// The state of each path (subflows on the same address ids share it).
	subflowsOf := map[rampKey][]observe.Subflow{}
	var keys []rampKey
	for _, sf := range c.Subflows {
		k := rampKey{sf.LocalID, sf.RemoteID}
		if _, ok := subflowsOf[k]; !ok {
			keys = append(keys, k)
		}
		subflowsOf[k] = append(subflowsOf[k], sf)
	}
	sort.Slice(keys, func(i, j int) bool {
		return keys[i].local < keys[j].local || keys[i].local == keys[j].local && keys[i].remote < keys[j].remote
	})
	for k := range st.paths {
		if _, ok := subflowsOf[k]; !ok {
			delete(st.paths, k)
		}
	}
	reports := map[rampKey]PathHealth{}
	for _, h := range c.Health {
		reports[rampKey{h.LocalID, h.RemoteID}] = h
	}
	for _, k := range keys {
		ps := st.paths[k]
		if ps == nil {
			ps = &rampPath{state: "active", since: now, hold: r.Hold, born: now}
			st.paths[k] = ps
		}
		h, ok := reports[k]
		isFresh := ok && fresh(h)
		var bad, good bool
		if isFresh {
			bad, good = r.judge(h, now.Sub(ps.born) >= r.Warmup)
		}
		what := describe(h, isFresh, now)
		switch ps.state {
		case "active":
			ps.why = "active: " + what
			if bad && r.startWorthTrial(now, ps, c, subflowsOf[k], what) {
				break
			}
			if bad {
				ps.inactivate(now, fmt.Sprintf("inactive: the receiver reports %s (limits: loss %.1f%%, last hop %.1f%%); hold %s",
					what, 100*float64(r.LossHigh), 100*float64(r.HealthLow), ps.hold))
			}
		case "trial":
			if !now.Before(ps.probeUntil) {
				r.endWorthTrial(now, ps, st, k, what)
			} else {
				ps.why = fmt.Sprintf("judged in use for %s more (does the connection deliver more with it than its other paths alone?): %s",
					fmtMs(ps.probeUntil.Sub(now)), what)
			}
		case "tolerated":
			r.tolerated(now, ps, st, k, isFresh && good, what)
		case "inactive":
			if now.Sub(ps.since) < ps.hold {
				break
			}
			// A path that failed a trial and is still reported bad has
			// its next trial instead of a probe (which would fail).
			if ps.worthTrials > 0 && bad && r.startWorthTrial(now, ps, c, subflowsOf[k], what) {
				break
			}
			if isFresh && h.LastHopKnown && h.LastHop <= float64(r.HealthLow) && h.Received.After(ps.since) {
				// The receiver's radio still says bad: no probe spent.
				ps.since = now
				ps.why = fmt.Sprintf("inactive: the last hop is still bad (%s); hold %s", what, ps.hold)
				break
			}
			ps.state, ps.probeStart, ps.probeUntil = "probing", now, now.Add(r.ProbeWindow)
			ps.probes++
			ps.why = fmt.Sprintf("probing for %s after a hold of %s", r.ProbeWindow, ps.hold)
		case "probing":
			recent := isFresh && h.Received.After(ps.probeStart)
			switch {
			case recent && bad:
				ps.hold = min(2*ps.hold, r.MaxHold)
				ps.inactivate(now, fmt.Sprintf("inactive again: the probe brought %s; hold %s", what, ps.hold))
			case !now.Before(ps.probeUntil) && recent && good:
				ps.activate(now, r.Hold, "active again: the probe brought "+what)
			case !now.Before(ps.probeUntil):
				ps.hold = min(2*ps.hold, r.MaxHold)
				ps.inactivate(now, fmt.Sprintf("inactive: the probe brought no good report (%s); hold %s", what, ps.hold))
			default:
				ps.why = fmt.Sprintf("probing for %s more: %s", fmtMs(ps.probeUntil.Sub(now)), what)
			}
		}
	}

	// Never every path inactive: the healthiest stays (never below
	// single-path TCP over the better path).
	inactive := 0
	for _, k := range keys {
		if st.paths[k].state == "inactive" {
			inactive++
		}
	}
	keep := rampKey{}
	kept := false
	if inactive == len(keys) && len(keys) > 0 {
		best, bestScore := keys[0], -1.0
		for _, k := range keys {
			h, ok := reports[k]
			score := 0.5
			if ok && fresh(h) {
				score = 1
				if h.LossKnown {
					score -= h.Loss
				}
				if h.LastHopKnown {
					score = min(score, h.LastHop)
				}
			}
			if score > bestScore {
				best, bestScore = k, score
			}
		}
		keep, kept = best, true
	}

	cs := &RAMPTCPConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	for _, k := range keys {
		ps := st.paths[k]
		backup := ps.state == "inactive"
		reason := ps.why
		if kept && k == keep {
			backup = false
			reason = "every path looks bad; this one is the healthiest and stays active (never below single-path TCP): " + ps.why
		}
		ps2 := RAMPTCPPathStatus{Path: fmt.Sprintf("%d→%d", k.local, k.remote), State: ps.state, HoldMs: float64(ps.hold) / 1e6,
			Inactivations: ps.inactivations, Probes: ps.probes, Reason: reason}
		if ps.with > 0 || ps.others > 0 {
			w, o := ps.with*8/1e6, ps.others*8/1e6
			ps2.WithMbit, ps2.OthersMbit = &w, &o
		}
		if !ps.lastInactive.IsZero() {
			ps2.LastInactive = ps.lastInactive.Format(time.RFC3339Nano)
		}
		if h, ok := reports[k]; ok {
			ps2.Reports = h.Reports
			age := float64(now.Sub(h.Received)) / 1e6
			ps2.ReportAgeMs = &age
			if h.LossKnown {
				v := 100 * h.Loss
				ps2.LossPct = &v
			}
			if h.LastHopKnown {
				v := 100 * h.LastHop
				ps2.LastHopPct = &v
			}
		}
		for _, sf := range subflowsOf[k] {
			ps2.Subflows = append(ps2.Subflows, ID(sf).String())
			out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: backup, Reason: reason})
		}
		cs.Paths = append(cs.Paths, ps2)
	}
	return out, cs
}

// startWorthTrial starts a lossy path's trial in use, when its subflows
// run a congestion control of WorthCC, the kernel gives the connection's
// in-order delivery, the connection has enough unacknowledged to show
// what the path adds, and the path had fewer than WorthTrials trials
// since it was last active with good reports. Each trial is twice as
// long as the one before.
func (r *RAMPTCP) startWorthTrial(now time.Time, ps *rampPath, c *Conn, sfs []observe.Subflow, what string) bool {
	if r.WorthTrial <= 0 || ps.worthTrials >= r.WorthTrials || c.BytesAcked == 0 || c.BytesSent < c.BytesAcked+rampBusy {
		return false
	}
	if len(r.WorthCC) > 0 && !slices.ContainsFunc(sfs, func(sf observe.Subflow) bool { return slices.Contains(r.WorthCC, sf.CC) }) {
		return false
	}
	length := r.WorthTrial << ps.worthTrials
	ps.worthTrials++
	ps.with, ps.others = 0, 0
	ps.state, ps.since, ps.probeStart, ps.probeUntil = "trial", now, now, now.Add(length)
	ps.why = fmt.Sprintf("judged in use for %s (trial %d of %d): the receiver reports %s; does the connection deliver more with it than its other paths alone?",
		length, ps.worthTrials, r.WorthTrials, what)
	return true
}

// endWorthTrial judges a path's trial: kept in use if the connection
// delivered in order WorthGain more than its other paths did on their
// own. While no two samples fall in the trial (the daemon decided between
// samples), it goes on, up to twice its length. A failed trial after the
// first doubles the hold.
func (r *RAMPTCP) endWorthTrial(now time.Time, ps *rampPath, st *rampConn, k rampKey, what string) {
	with, others, ok := st.delivered(ps.probeStart.Add(rampSettle), k)
	if !ok && now.Before(ps.probeUntil.Add(ps.probeUntil.Sub(ps.probeStart))) {
		ps.why = "judged in use until the connection's delivery is sampled: " + what
		return
	}
	ps.with, ps.others = with, others
	if ok && with > 0 && with >= others*(1+float64(r.WorthGain)) {
		ps.state, ps.since, ps.goodSince = "tolerated", now, time.Time{}
		ps.why = fmt.Sprintf("kept despite its loss (%s): the connection delivered %s with it, its other paths %s alone", what, mbit(with), mbit(others))
		return
	}
	if ps.worthTrials > 1 {
		ps.hold = min(2*ps.hold, r.MaxHold)
	}
	next := "no more trials while its reports stay bad"
	if ps.worthTrials < r.WorthTrials {
		next = "then its next trial"
	}
	ps.inactivate(now, fmt.Sprintf("inactive: it did not pay in use (the connection delivered %s with it, its other paths %s alone; %s); hold %s, %s",
		mbitOrUnknown(with, ok), mbitOrUnknown(others, ok), what, ps.hold, next))
}

// rampToleratedWindow: what a tolerated path's connection delivers is
// judged over this long: a lossy path's holes make it swing by half from
// one second to the next.
const rampToleratedWindow = 3 * time.Second

// tolerated keeps a lossy path that pays in use: until its reports have
// been good for a hold (then it is simply active: a lossy path's reports
// are good now and then), or the connection delivers over the last
// rampToleratedWindow less than its other paths alone (then it goes
// aside, with a doubled hold, and is not tried again for its worth in
// this spell).
func (r *RAMPTCP) tolerated(now time.Time, ps *rampPath, st *rampConn, k rampKey, good bool, what string) {
	switch {
	case !good:
		ps.goodSince = time.Time{}
	case ps.goodSince.IsZero():
		ps.goodSince = now
	case now.Sub(ps.goodSince) >= r.Hold:
		ps.activate(now, r.Hold, fmt.Sprintf("active again: good reports for %s (%s)", r.Hold, what))
		return
	}
	with, others, ok := st.delivered(now.Add(-rampToleratedWindow), k)
	if ok {
		ps.with, ps.others = with, others
	}
	if now.Sub(ps.since) < rampToleratedWindow || !ok || with >= others {
		ps.why = fmt.Sprintf("kept despite its loss (%s): the connection delivers %s with it, its other paths %s alone",
			what, mbit(ps.with), mbit(ps.others))
		return
	}
	ps.hold = min(2*ps.hold, r.MaxHold)
	ps.worthTrials = r.WorthTrials
	ps.inactivate(now, fmt.Sprintf("inactive: kept despite its loss, the connection now delivers %s with it, less than its other paths alone (%s; %s); hold %s",
		mbit(with), mbit(others), what, ps.hold))
}

func mbitOrUnknown(bps float64, ok bool) string {
	if !ok {
		return "an unknown rate"
	}
	return mbit(bps)
}

// Status reports the last round.
func (r *RAMPTCP) Status() any {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.status
}
