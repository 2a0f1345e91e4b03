package policy

import (
	"net/netip"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// shaper decides, every round, which of a connection's subflows carry
// traffic and at what rate, so that no subflow holds data the others wait
// for at the receiver: the core that ecf and dynthresh share.
//
// A path earns its traffic before it gets it. The main path (the one that
// has carried the most; the initial subflow while it warms up, for
// WarmupRTTs of its RTT) is never held back. Every other subflow is:
//   - aside (backup) when it joins (Requirements.JoinBackup: it carries
//     nothing before the policy has seen it), and between trials;
//   - entering, when it is near (base RTT within EntryFactor of the paths
//     in use): it carries at once, as MPTCP would have it, and stays when
//     it carries SlowShare of the main path's rate (see endEntries);
//   - on trial: it carries traffic for one trial period (3 of its RTTs, at
//     least 300 ms, plus one RTT for its first data to come back), one
//     subflow of a connection at a time. It passes if the connection then
//     delivers in order (DATA_ACKs) Gain more than just before, while it
//     was aside; else it goes aside again and the next trial waits Retry,
//     then twice as long after every failed trial (up to 16× Retry);
//   - free: it passed. It is set aside again (and retried the same way)
//     when the connection delivers Margin less than its main path alone
//     for a second: the paper's threshold, as a safety net;
//   - waited on: a far path (see capped) goes aside when, in HeldShare
//     of the rounds of the last 3 s, the main path sat nearly idle (less
//     than a quarter of its window in flight) while this one had data in
//     flight: the connection's window was full of what waits for it,
//     which no share of the bytes it carries shows, and which the safety
//     net cannot see when the main path has never carried alone (many
//     connections that share a slow path, each held by its window);
//   - capped (InTimeCaps): a far path (base RTT SlowFactor× the main
//     one's) is held to what arrives in time within the receive window W:
//     the window spans what is sent over the lag between a byte sent there
//     and its DATA_ACK returning over the main path (about the mean of the
//     two base RTTs), so (C_main + r)·lag ≤ Headroom·W. The MPTCP scheduler
//     hands a subflow bursts of up to 64 KiB, which wait behind its cap for
//     64 KiB/r: that adds to the lag (see inTimeRate). Where the model
//     leaves less than a burst per lag, it stays uncapped: the trial and
//     the safety net, which see what the connection delivers, decide (the
//     model is conservative: MPTCP's bursts are often smaller).
//
// With InTimeGate (ecf's default; dynthresh keeps it off), the model also
// keeps a far path out where it cannot help:
//   - no room: a far path that carries goes aside when the main path
//     alone fills the window within the lag (C_main·(1+Gain)·lag ≥
//     Headroom·W, once the main path has carried for a second): nothing
//     it could carry arrives in time;
//   - unfit: a far path set aside while the model says it cannot carry its
//     rate in time (inTimeRate below what it has carried) gets no further
//     trial until the window or the main path's rate has changed by a
//     quarter since: in the same conditions a trial costs the connection
//     most of its rate for its period and can only fail again (ecf-50-10-
//     512k: three trials at 4, 15 and 11 Mbit/s against 47 without);
//     and such a path goes aside after 1 s of the main path waiting on it,
//     not 2;
//   - no gain in time: under a loss-based CC on the main path, a far
//     joiner the model lets carry less than Gain of the main path's rate
//     in time never enters (see noGainInTime);
//   - a near joiner under SlowShare that adds Gain, all in time, stays
//     (see endEntries).
type shaper struct {
	ShaperConfig
	conns map[uint32]*shapeConn
	// held: per local address, what holds its trials back, as the last
	// round left it: the latest next trial of an aside subflow from it,
	// and whether one from it is on trial. A trial waits for both, so that
	// one address's trials start together, in one round: under the kernel
	// path manager the backup flag is the address's, and one connection's
	// trial puts every connection's subflow from it back to work.
	held map[netip.Addr]trialHold
	// groups: how many subflows are on each group trial (see judge), as
	// the last round left them.
	groups map[trialGroup]int
}

// ShaperConfig is what ecf and dynthresh's shaped mode read of their
// config entry.
type ShaperConfig struct {
	Margin units.Fraction `yaml:"margin"`
	Gain   units.Fraction `yaml:"gain"`
	Retry  time.Duration  `yaml:"retry" above:"0s"`
	// InTimeCaps: far paths are capped to what arrives in time.
	InTimeCaps bool `yaml:"in_time_caps"`
	// JoinBackup: new subflows join as backup (Requirements.JoinBackup),
	// so none carries before the policy has seen it; off, a joiner
	// carries from its handshake until the first decision on it (short
	// transfers over near paths gain a few tens of ms).
	JoinBackup bool    `yaml:"join_backup"`
	SlowFactor float64 `yaml:"slow_factor" min:"1" max:"100"`
	// EntryFactor: a joiner whose base RTT is within this many times the
	// paths in use is near: it enters at once; farther ones wait for a
	// trial.
	EntryFactor float64 `yaml:"entry_factor" min:"1" max:"1000"`
	// NearerFactor: a joiner this many times nearer (base RTT, see
	// entryRTT) than a main path still warming up waits for the warm-up to
	// end (0: never waits). As EntryFactor by default: a joiner is near
	// within that factor either way.
	NearerFactor float64 `yaml:"nearer_factor" min:"0" max:"1000"`
	// SlowShare: a near joiner that carries less than this share of the
	// main path's bytes in its entry period goes aside.
	SlowShare units.Fraction `yaml:"slow_share"`
	// HeldShare: a far path goes aside when the main path waited on it in
	// this share of the last 3 s's rounds (0: never).
	HeldShare units.Fraction `yaml:"held_share"`
	// FarTrialRTTs: a far joiner's first trial waits this many of its RTTs
	// (at least Retry).
	FarTrialRTTs float64 `yaml:"far_trial_rtts" min:"0" max:"1000"`
	// TrialRTTs: a trial lasts this many of the subflow's RTTs (at least
	// 300 ms), after one RTT for its first data to come back.
	TrialRTTs float64        `yaml:"trial_rtts" min:"1" max:"1000"`
	Headroom  units.Fraction `yaml:"headroom" above:"0%"`
	// Window overrides the receive window planned for (0: the window the
	// peer advertises; a TCP window is at most 1 GiB).
	Window     units.Size `yaml:"window" min:"0B" max:"1GiB"`
	WarmupRTTs float64    `yaml:"warmup_rtts" min:"0" max:"1000"`
	// InTimeGate: a far path is kept out where the in-time model says it
	// cannot help (see shaper: "no room", "unfit").
	InTimeGate bool `yaml:"in_time_gate"`
	// StartupGuard: while a subflow is young, the others of its connection
	// may not pace far above what they deliver into a queue of their own
	// (shaper_guard.go).
	StartupGuard bool `yaml:"startup_guard"`
	// ProbeRTTPause: the safety net pauses while the main path runs BBR's
	// ProbeRTT (its window at 4 segments) and for a second and an RTT
	// after: the dip is the main path's own, not what another path holds up.
	ProbeRTTPause bool `yaml:"probe_rtt_pause"`
	// ProbeRTTRest: a far path under BBR goes aside just before its
	// ProbeRTT and comes back after it (shaper_probertt.go).
	ProbeRTTRest bool `yaml:"probe_rtt_rest"`
	// NotSentLowat bounds what MPTCP queues, unsent, on each subflow
	// (TCP_NOTSENT_LOWAT): data queued on a path that is then set aside
	// must still go out there, and the receiver waits for it. Off by
	// default: MPTCP refills a subflow's queue only as it drains, so 64 KiB
	// holds a 400 ms path to about 1.3 Mbit/s (measured: asym-5 fell from
	// 192 to 13 Mbit/s).
	NotSentLowat units.Size `yaml:"notsent_lowat" min:"0B" max:"1GiB"`
}

func (p *shaper) requirements() Requirements {
	return Requirements{Limits: p.InTimeCaps || p.StartupGuard, NotSentLowat: int(p.NotSentLowat), JoinBackup: p.JoinBackup,
		BBRState: p.ProbeRTTRest}
}

func newShaper() shaper {
	return shaper{ShaperConfig: ShaperConfig{Margin: 0.1, Gain: 0.05, Retry: 2 * time.Second, InTimeCaps: true, JoinBackup: true,
		SlowFactor: 1.25, EntryFactor: 6, NearerFactor: 6, SlowShare: 0.25, HeldShare: 0.5, FarTrialRTTs: 25, TrialRTTs: 3,
		Headroom: 0.9, WarmupRTTs: 10, InTimeGate: true, ProbeRTTPause: true, ProbeRTTRest: true, StartupGuard: true}, conns: map[uint32]*shapeConn{}, held: map[netip.Addr]trialHold{}, groups: map[trialGroup]int{}}
}

type shapeConn struct {
	subs   map[SubflowID]*shapeSub
	wnd    peak
	agg    rate        // DATA_ACKed bytes per second, over 1 s
	recent recentRates // agg over the last 3 s, for its median
	below  time.Time   // since when it delivers less than without its other paths
	// probeRTT: when its main path was last seen in BBR's ProbeRTT.
	probeRTT time.Time
	trial    SubflowID // the subflow on trial (zero: none)
	// alone: what the connection delivered without the subflow last put on
	// trial (0: no trial yet; the main path's level counts).
	alone float64
}

// Subflow states.
const (
	shAside  = "aside"
	shEntry  = "entry"
	shTrial  = "trial"
	shFree   = "free"
	shCapped = "capped"
)

type shapeSub struct {
	seen    time.Time
	initial bool
	acked   rate        // bytes acknowledged per second, over 1 s
	recent  recentRates // acked over the last 3 s, for its median
	level   peak        // the best of that median over 30 s
	best    peak        // the best of acked (full 1 s windows) over 30 s
	state   string
	why     string
	// Trials: when this one started, what the connection delivered before
	// it, the DATA_ACK counter after its first RTT; when the next is due
	// and how long the one after that waits.
	trialStart time.Time
	before     float64
	mark       uint64
	markAt     time.Time
	nextTrial  time.Time
	retry      time.Duration
	// Entry (a near joiner): until when, and the byte counters of it and
	// of the main path when it joined.
	entryAt    time.Time
	entryUntil time.Time
	entryBytes uint64
	mainBytes  uint64
	// held: 1 for each round in which the main path sat nearly idle while
	// this one had data in flight, else 0, over 3 s; heldAsides: how often
	// that set it aside.
	held       recentRates
	heldAsides int
	// judged: its trial period is over, with during (what its connection
	// delivered meanwhile); its group's verdict is still to come.
	judged bool
	during float64
	// The in-time gate (InTimeGate): recorded the first round it is
	// aside, the window and the main path's rate then, and whether the
	// model said it could not carry its rate in time (unfit); gateHeld: it
	// is unfit and neither has changed by a quarter since (no trial).
	gateSet  bool
	unfit    bool
	gateAt   time.Time
	gateWnd  uint64
	gateMain float64
	gateHeld bool
	// The startup guard (shaper_guard.go): since when it may carry (zero
	// while aside), and the most it delivered while the guard held it
	// (bytes/s; 0: not held).
	carryFrom time.Time
	guard     float64
	// rest: its rest through BBR's ProbeRTT (shaper_probertt.go).
	rest probeRTTRest
}

// ShapeSubflowStatus is one subflow's numbers and state.
type ShapeSubflowStatus struct {
	Subflow  string  `json:"subflow"`
	RTTMs    float64 `json:"base_rtt_ms"`
	RateMbit float64 `json:"rate_mbit"`
	BestMbit float64 `json:"best_mbit"`
	State    string  `json:"state"`
	Cap      string  `json:"cap"`
	// WaitedPct: the share of the last 3 s's rounds in which the main
	// path sat nearly idle while this one had data in flight (far paths
	// only; see HeldShare).
	WaitedPct float64 `json:"main_waited_pct"`
	Why       string  `json:"why"`
}

// ShapeConnStatus is one connection's decisions.
type ShapeConnStatus struct {
	Token         string               `json:"token"`
	Main          string               `json:"main_subflow,omitempty"`
	MainMbit      float64              `json:"main_mbit"`
	AggregateMbit float64              `json:"aggregate_mbit"`
	WindowB       uint64               `json:"window_bytes"`
	Subflows      []ShapeSubflowStatus `json:"subflows"`
}

// capacity is what a subflow has shown it carries: the best it delivered,
// or cwnd·MSS/SRTT while it has no full second of delivery yet.
func (s *shapeSub) capacity(sf observe.Subflow) float64 {
	if v, ok := s.best.get(); ok {
		return v
	}
	return sf.ThroughputEstimate()
}

// decideAll decides every connection of a snapshot: the actions and each
// connection's status; it forgets connections that are gone.
func (p *shaper) decideAll(s *Snapshot) ([]Action, []ShapeConnStatus) {
	var out []Action
	var status []ShapeConnStatus
	live := map[uint32]bool{}
	if p.groups == nil {
		p.held, p.groups = map[netip.Addr]trialHold{}, map[trialGroup]int{}
	}
	clear(p.held)
	clear(p.groups)
	for _, st := range p.conns {
		for id, sub := range st.subs {
			addr := id.Local.Addr()
			switch {
			case sub.state == shAside && !sub.nextTrial.IsZero():
				h := p.held[addr]
				if sub.nextTrial.After(h.until) {
					h.until = sub.nextTrial
				}
				h.gated = h.gated || sub.gateHeld
				p.held[addr] = h
			case sub.state == shTrial:
				h := p.held[addr]
				h.running = true
				p.held[addr] = h
				p.groups[trialGroup{addr, sub.trialStart}]++
			}
		}
	}
	for _, c := range s.Conns {
		live[c.Token] = true
		acts, cs := p.shape(s.Now, c)
		out = append(out, acts...)
		status = append(status, cs)
	}
	p.forget(live)
	p.judgeGroups(s.Now)
	return out, status
}

// carrying is what a subflow carries lately: the median of its 1 s
// rates over 3 s (before the first, what its window carries per RTT).
func (s *shapeSub) carrying(sf observe.Subflow) float64 {
	if len(s.recent.v) == 0 {
		return sf.ThroughputEstimate()
	}
	return s.recent.median()
}

// forget drops connections that are gone.
func (p *shaper) forget(live map[uint32]bool) {
	for tok := range p.conns {
		if !live[tok] {
			delete(p.conns, tok)
		}
	}
}
