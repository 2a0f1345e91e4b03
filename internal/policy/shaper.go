package policy

import (
	"fmt"
	"math"
	"net/netip"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/stats"
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
//     it carries SlowShare of the main path's rate (see shape);
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
	// NearerFactor: a joiner this many times nearer (base RTT) than a main
	// path still warming up waits for the warm-up to end (0: never waits).
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
	// NotSentLowat bounds what MPTCP queues, unsent, on each subflow
	// (TCP_NOTSENT_LOWAT): data queued on a path that is then set aside
	// must still go out there, and the receiver waits for it. Off by
	// default: MPTCP refills a subflow's queue only as it drains, so 64 KiB
	// holds a 400 ms path to about 1.3 Mbit/s (measured: asym-5 fell from
	// 192 to 13 Mbit/s).
	NotSentLowat units.Size `yaml:"notsent_lowat" min:"0B" max:"1GiB"`
}

type trialHold struct {
	until   time.Time
	running bool
}

// trialDue tells whether every aside subflow from addr is due for its
// trial and none from it is on trial since an earlier round.
func (p *shaper) trialDue(now time.Time, addr netip.Addr) bool {
	h := p.held[addr]
	return !h.running && !now.Before(h.until)
}

// trialGroup is the trials from one local address that started in one
// round.
type trialGroup struct {
	addr  netip.Addr
	start time.Time
}

func (p *shaper) requirements() Requirements {
	return Requirements{Limits: p.InTimeCaps, NotSentLowat: int(p.NotSentLowat), JoinBackup: p.JoinBackup}
}

func newShaper() shaper {
	return shaper{ShaperConfig: ShaperConfig{Margin: 0.1, Gain: 0.05, Retry: 2 * time.Second, InTimeCaps: true, JoinBackup: true,
		SlowFactor: 1.25, EntryFactor: 6, NearerFactor: 4, SlowShare: 0.25, HeldShare: 0.5, FarTrialRTTs: 25, TrialRTTs: 3,
		Headroom: 0.9, WarmupRTTs: 10}, conns: map[uint32]*shapeConn{}, held: map[netip.Addr]trialHold{}, groups: map[trialGroup]int{}}
}

// burst is the most the MPTCP scheduler hands a subflow at once.
const burst = 64 << 10

type shapeConn struct {
	subs   map[SubflowID]*shapeSub
	wnd    peak
	agg    rate        // DATA_ACKed bytes per second, over 1 s
	recent recentRates // agg over the last 3 s, for its median
	below  time.Time   // since when it delivers less than without its other paths
	trial  SubflowID   // the subflow on trial (zero: none)
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
				if h := p.held[addr]; sub.nextTrial.After(h.until) {
					h.until = sub.nextTrial
					p.held[addr] = h
				}
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

// shape decides one connection: the actions and its status.
func (p *shaper) shape(now time.Time, c *Conn) ([]Action, ShapeConnStatus) {
	cs := ShapeConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	st := p.conns[c.Token]
	if st == nil {
		st = &shapeConn{subs: map[SubflowID]*shapeSub{}}
		p.conns[c.Token] = st
	}
	var wnd uint64
	var sum float64
	present := map[SubflowID]bool{}
	cur := map[SubflowID]float64{}
	for _, sf := range c.Subflows {
		id := ID(sf)
		present[id] = true
		s := st.subs[id]
		if s == nil {
			s = &shapeSub{seen: now, initial: sf.LocalID == 0 && (!c.Local.IsValid() || sf.Local == c.Local),
				state: shAside, retry: p.Retry, why: "joined: aside until its trial"}
			if s.initial || len(c.Subflows) == 1 {
				s.state, s.why = shFree, "the connection's first path"
			} else if baseRTT(sf) == 0 {
				// Known from an event only: its RTT shows with the next
				// sample (a far path must not carry anything meanwhile).
				s.why = "joined: aside until its RTT is known"
			}
			// Other joiners are placed below, once the main path is known.
			st.subs[id] = s
		}
		r, full := s.acked.over(now, sf.BytesAcked, time.Second)
		cur[id], sum = r, sum+r
		s.recent.add(now, r, 3*time.Second)
		if full && s.state != shAside {
			s.best.add(now, r, 30*time.Second)
			s.level.add(now, s.recent.median(), 30*time.Second)
		}
		wnd = max(wnd, uint64(sf.SndWnd))
	}
	for id := range st.subs {
		if !present[id] {
			delete(st.subs, id)
		}
	}
	if !present[st.trial] {
		st.trial = SubflowID{}
	}
	// What the connection delivers in order (the sum of its subflows' when
	// the kernel gives no connection-level counter).
	bytes := c.BytesAcked
	agg, aggFull := st.agg.over(now, bytes, time.Second)
	if bytes == 0 {
		agg, aggFull = sum, true
	}
	st.recent.add(now, agg, 3*time.Second)
	wnd = uint64(st.wnd.add(now, float64(wnd), 3*time.Second))
	if p.Window > 0 {
		wnd = uint64(p.Window)
	}
	cs.WindowB, cs.AggregateMbit = wnd, agg*8/1e6
	if len(c.Subflows) < 2 {
		for _, sf := range c.Subflows {
			if s := st.subs[ID(sf)]; s.state != shFree {
				s.state, s.why = shFree, "the connection's only path"
			}
		}
		return nil, cs
	}

	// The main path: the one that carries the most lately (its median
	// over 3 s; a warming initial subflow stays it). Not its best of 30 s:
	// a path that has just turned bad would stay main, and the safety net
	// would set the good one aside.
	main := c.Subflows[0]
	best := -1.0
	for _, sf := range c.Subflows {
		s := st.subs[ID(sf)]
		if s.initial && now.Sub(s.seen) < time.Duration(p.WarmupRTTs*float64(max(sf.SRTT, time.Millisecond))) {
			main, best = sf, math.Inf(1)
		}
		if r := s.carrying(sf); s.state != shAside && r > best {
			main, best = sf, r
		}
	}
	mainID := ID(main)
	ms := st.subs[mainID]
	// Trials wait until the initial path has warmed up (and carried for
	// half a second): before that, "without it" is not a baseline.
	warming := ms.initial && now.Sub(ms.seen) < max(500*time.Millisecond, time.Duration(p.WarmupRTTs*float64(max(main.SRTT, time.Millisecond))))
	mainNow := ms.recent.median() // what it carries now, without 1 s spikes
	cs.Main, cs.MainMbit = mainID.String(), mainNow*8/1e6
	if ms.state != shFree {
		ms.state, ms.why = shFree, "main path"
	}

	// Joiners not yet placed: near ones enter, far ones wait for their
	// trial (a far joiner's trial stalls the connection for about its
	// RTT: its first waits FarTrialRTTs of them, so that a short transfer
	// never pays for it). A near joiner carries
	// from the start, as MPTCP would have it, and is judged by its share
	// after its entry period; but one NearerFactor× nearer than a main
	// path that still warms up waits for the warm-up to end: MPTCP's
	// scheduler would give it the data first and starve the main path's
	// slow start (a 4 ms, 4 Mbit/s joiner beside a 400 ms, 400 Mbit/s
	// path slowed its ramp by 2 s).
	for _, sf := range c.Subflows {
		s := st.subs[ID(sf)]
		if s.state != shAside || !s.nextTrial.IsZero() || baseRTT(sf) == 0 || ID(sf) == mainID {
			continue
		}
		if p.nearJoin(st, c, sf) {
			if warming && p.NearerFactor > 0 && float64(flooredRTT(baseRTT(sf)))*p.NearerFactor < float64(baseRTT(main)) {
				s.why = fmt.Sprintf("joined %s, far nearer than the main path's %s while it warms up: enters after",
					fmtMs(baseRTT(sf)), fmtMs(baseRTT(main)))
				continue
			}
			s.state = shEntry
			s.startEntry(now, sf, main)
			s.why = "joined as near as the paths in use: carries while it shows its share"
		} else {
			s.nextTrial = now.Add(max(p.Retry, time.Duration(p.FarTrialRTTs*float64(baseRTT(sf)))))
			s.why = fmt.Sprintf("joined far (base RTT %s): aside until its trial", fmtMs(baseRTT(sf)))
		}
	}

	// Entries that end (after the main path's warm-up too): the joiner
	// stays if it carried SlowShare of what the main path did meanwhile.
	for _, sf := range c.Subflows {
		s := st.subs[ID(sf)]
		if s.state != shEntry || ID(sf) == mainID {
			continue
		}
		if sf.Backup() {
			// The kernel has not made it usable yet (its MP_PRIO is still
			// to go out): its entry starts when it can carry.
			s.startEntry(now, sf, main)
			continue
		}
		// Its share: what it carries (bytes over its entry, or what its
		// window carries per RTT, whichever is more: a joiner with a longer
		// RTT is still in slow start when a near one has long left it)
		// against what the main path carries.
		elapsed := math.Max(now.Sub(s.entryAt).Seconds(), 1e-3)
		own := float64(sf.BytesAcked-min(s.entryBytes, sf.BytesAcked)) / elapsed
		rate := math.Max(own, sf.ThroughputEstimate())
		mainRate := math.Max(float64(main.BytesAcked-min(s.mainBytes, main.BytesAcked))/elapsed, cur[mainID])
		share := rate / math.Max(mainRate, 1)
		// A joiner that carries far less (a quarter of SlowShare) goes
		// aside early, once the main path has had its warm-up RTTs: every
		// round it stays costs what its slow deliveries hold up. Once it
		// has had 10 of its RTTs (out of slow start) that is judged by what
		// it delivered: its window per RTT counts what waits in its queue
		// too, and overstates a slow path (6.2 against the 4 Mbit/s a path
		// delivered, which kept it on 250 ms longer). Not the end of an
		// entry, whose share of SlowShare a path still ramping up must
		// reach too: what it delivered since its entry holds its ramp.
		early := now.Sub(s.entryAt) >= max(100*time.Millisecond, 3*baseRTT(sf)) &&
			now.Sub(ms.seen) >= time.Duration(p.WarmupRTTs*float64(max(main.SRTT, time.Millisecond))) &&
			mainRate > 0
		if early && elapsed >= 10*baseRTT(sf).Seconds() && own/math.Max(mainRate, 1) < float64(p.SlowShare)/4 {
			rate, share = own, own/math.Max(mainRate, 1)
		}
		early = early && share < float64(p.SlowShare)/4
		if (now.Before(s.entryUntil) || warming) && !early {
			continue
		}
		if share < float64(p.SlowShare) {
			why := fmt.Sprintf("it carried %s in its first %s, %.0f%% of the main path's %s",
				mbit(rate), fmtMs(now.Sub(s.seen)), 100*share, mbit(mainRate))
			// At that rate it could not add the gain a trial asks for: its
			// trials wait the longest (each costs).
			if rate < float64(p.Gain)*math.Max(mainNow, mainRate) {
				s.retry = 16 * p.Retry
				why += fmt.Sprintf("; it cannot add %.0f%%", 100*float64(p.Gain))
			}
			p.setAside(now, s, why)
		} else {
			s.state = shFree
			s.why = fmt.Sprintf("carried %.0f%% of the main path's rate in its first %s", 100*share, fmtMs(now.Sub(s.seen)))
		}
	}

	// Far paths the main path waits on (see HeldShare).
	if float64(p.HeldShare) > 0 && !warming {
		for _, sf := range c.Subflows {
			s, id := st.subs[ID(sf)], ID(sf)
			if id == mainID || !(s.state == shEntry || s.state == shFree || s.state == shCapped) || !p.far(sf, main) {
				continue
			}
			waited := 0.0
			if main.Cwnd > 10 && 4*main.Unacked < main.Cwnd && sf.Unacked > 0 {
				waited = 1
			}
			s.held.add(now, waited, 3*time.Second)
			if s.held.span() >= 2*time.Second && s.held.mean() >= float64(p.HeldShare) {
				s.heldAsides++
				p.setAside(now, s, fmt.Sprintf("the main path sat idle while it held data in %.0f%% of the last %s: the connection waited on it",
					100*s.held.mean(), fmtMs(s.held.span())))
			}
		}
	}

	// The safety net: the connection delivers less than without its other
	// paths (what it did before the last trial, or its main path's level,
	// the best 3 s median of the last 30 s), for a second (and 2 RTTs of
	// the main path): the slowest free subflow goes aside (one per round).
	alone := st.alone
	if alone == 0 {
		alone = ms.level.max()
	}
	if aggFull && agg < (1-float64(p.Margin))*alone && !warming {
		if st.below.IsZero() {
			st.below = now
		}
		if now.Sub(st.below) >= max(time.Second, 2*main.SRTT) {
			// The one that delivers least now (its last second).
			var worst *shapeSub
			var worstID SubflowID
			for _, sf := range c.Subflows {
				s, id := st.subs[ID(sf)], ID(sf)
				if id != mainID && (s.state == shFree || s.state == shCapped || s.state == shEntry) && (worst == nil || cur[id] < cur[worstID]) {
					worst, worstID = s, id
				}
			}
			if worst != nil {
				p.setAside(now, worst, fmt.Sprintf("the connection delivered %s in order, below the %s it did without it", mbit(agg), mbit(alone)))
				st.below = now
			}
		}
	} else {
		st.below = time.Time{}
	}

	// The trial that is running ends, or the one that is due starts.
	if t := st.subs[st.trial]; t != nil {
		p.judge(now, st, t, c)
	}
	if st.trial == (SubflowID{}) && !warming {
		for _, sf := range c.Subflows {
			s := st.subs[ID(sf)]
			// (Only while the connection delivers at its level: a trial
			// against a ramping or recovering baseline would pass anything.)
			if s.state == shAside && !now.Before(s.nextTrial) && p.trialDue(now, ID(sf).Local.Addr()) && st.recent.median() > 0 && st.recent.median() >= (1-float64(p.Margin))*ms.level.max() {
				st.trial = ID(sf)
				// Without it: what the connection delivered lately, at least
				// what its main path alone carries (the last seconds may
				// still hold the damage of its last turn).
				s.state, s.trialStart, s.before, s.mark, s.markAt = shTrial, now, math.Max(st.recent.median(), mainNow), 0, time.Time{}
				st.alone = s.before
				s.why = fmt.Sprintf("on trial: passes if the connection delivers %.0f%% more than the %s it did without it", float64(p.Gain)*100, mbit(s.before))
				break
			}
		}
	}

	var out []Action
	for _, sf := range c.Subflows {
		id := ID(sf)
		s := st.subs[id]
		rtt := baseRTT(sf)
		ss := ShapeSubflowStatus{Subflow: id.String(), RTTMs: float64(rtt) / 1e6, RateMbit: cur[id] * 8 / 1e6,
			BestMbit: s.capacity(sf) * 8 / 1e6}
		var r units.Rate
		if id != mainID && s.state != shAside && p.InTimeCaps {
			// What arrives in time on a far path.
			lag := (rtt + baseRTT(main)) / 2
			if p.far(sf, main) {
				inTime := inTimeRate(float64(p.Headroom)*float64(wnd), lag, mainNow)
				switch {
				case inTime < burst/lag.Seconds():
					// The model says nothing fits; what the connection
					// delivers decides (its trial, the safety net).
					if s.state == shCapped {
						s.state = shFree
					}
				case inTime < s.capacity(sf) || s.state == shTrial:
					r = roundRate(units.Rate(inTime * 8))
					if s.state == shFree {
						s.state = shCapped
					}
					s.why = fmt.Sprintf("in time: (main %s + this) × lag %s within %.0f%% of the %s window",
						mbit(mainNow), fmtMs(lag), float64(p.Headroom)*100, units.Size(wnd))
				case s.state == shCapped:
					s.state = shFree
				}
			}
		}
		ss.State, ss.Cap, ss.Why, ss.WaitedPct = s.state, RateText(r), s.why, 100*s.held.mean()
		out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: id, Backup: s.state == shAside, Reason: s.why},
			Action{Kind: Limit, Token: c.Token, Subflow: id, Rate: r, Reason: s.why})
		cs.Subflows = append(cs.Subflows, ss)
	}
	return out, cs
}

// startEntry starts a near joiner's entry period now: its bytes and the
// main path's are counted from here.
func (s *shapeSub) startEntry(now time.Time, sf, main observe.Subflow) {
	s.entryAt, s.entryUntil = now, now.Add(entryPeriod(sf))
	s.entryBytes, s.mainBytes = sf.BytesAcked, main.BytesAcked
}

// flooredRTT is an RTT for comparing paths: under a millisecond, what
// a path lags another by cannot hold anything up that matters (two veths
// in one host differ 15×, at 1 and 15 µs).
func flooredRTT(rtt time.Duration) time.Duration { return max(rtt, time.Millisecond) }

// entryPeriod is how long a near joiner carries before it is judged: 6
// of its RTTs (slow start needs about that to reach tens of Mbit/s from
// its initial window), at least 300 ms.
func entryPeriod(sf observe.Subflow) time.Duration {
	return max(300*time.Millisecond, 6*baseRTT(sf))
}

// nearJoin tells whether a joining subflow is as near as the paths in
// use: its RTT (from its handshake) within EntryFactor of theirs.
func (p *shaper) nearJoin(st *shapeConn, c *Conn, sf observe.Subflow) bool {
	rtt := baseRTT(sf)
	if rtt <= 0 {
		return false
	}
	var best time.Duration
	for _, o := range c.Subflows {
		if s := st.subs[ID(o)]; s != nil && s.state != shAside && ID(o) != ID(sf) {
			if r := baseRTT(o); r > 0 && (best == 0 || r < best) {
				best = r
			}
		}
	}
	return best > 0 && float64(flooredRTT(rtt)) <= p.EntryFactor*float64(flooredRTT(best))
}

// far tells whether a subflow's base RTT is SlowFactor× the main path's:
// what it carries lags enough to hold the connection up.
func (p *shaper) far(sf, main observe.Subflow) bool {
	rtt, mrtt := baseRTT(sf), baseRTT(main)
	return rtt > 0 && mrtt > 0 && float64(flooredRTT(rtt)) > p.SlowFactor*float64(flooredRTT(mrtt))
}

// inTimeRate is the largest rate r (bytes/s) a far path may carry beside
// a main path carrying c so that what it sends arrives in time within the
// window hw, when its data lags lag behind and every burst of 64 KiB waits
// burst/r behind its cap: (c + r)(lag + burst/r) ≤ hw, a quadratic in r.
// 0: nothing fits.
func inTimeRate(hw float64, lag time.Duration, c float64) float64 {
	l := lag.Seconds()
	if l <= 0 {
		return math.Inf(1)
	}
	b := c*l + burst - hw
	disc := b*b - 4*l*c*burst
	if b >= 0 || disc < 0 {
		return 0
	}
	return (-b + math.Sqrt(disc)) / (2 * l)
}

// judge ends a trial when its period is over.
func (p *shaper) judge(now time.Time, st *shapeConn, s *shapeSub, c *Conn) {
	var sf observe.Subflow
	for _, o := range c.Subflows {
		if ID(o) == st.trial {
			sf = o
		}
	}
	rtt := max(baseRTT(sf), sf.SRTT)
	if s.state != shTrial {
		st.trial = SubflowID{}
		return
	}
	if s.judged && p.groupSize(st.trial, s.trialStart) > 1 {
		return // its group is still on trial
	}
	if s.judged { // the others of its group are gone
		st.trial = SubflowID{}
		p.verdict(now, s, s.during, s.before, "the connection")
		return
	}
	// Measure from one RTT in (its first data has come back).
	if s.mark == 0 && now.Sub(s.trialStart) >= rtt {
		s.mark, s.markAt = max(c.BytesAcked, 1), now
		if c.BytesAcked == 0 {
			s.mark = 0
			s.markAt = now
		}
	}
	if s.markAt.IsZero() || now.Sub(s.markAt) < max(200*time.Millisecond, rtt) {
		return
	}
	during := st.recent.median()
	if c.BytesAcked > 0 {
		during = float64(c.BytesAcked-min(s.mark, c.BytesAcked)) / now.Sub(s.markAt).Seconds()
	}
	// A trial ends after TrialRTTs of the subflow's RTTs (at least 300 ms), or as
	// soon as the connection clearly suffers (every trial costs a
	// connection that the path does not help).
	if now.Sub(s.markAt) < max(300*time.Millisecond, time.Duration(p.TrialRTTs*float64(rtt))) && during >= 0.5*s.before {
		return
	}
	// The trials of one address that started together are judged
	// together, by what their connections delivered in all, once each has
	// had its period: under the kernel path manager they carried as one,
	// and one connection's rate among many swings more than the gain.
	s.during, s.judged = during, true
	if p.groupSize(st.trial, s.trialStart) > 1 {
		return
	}
	st.trial = SubflowID{}
	p.verdict(now, s, during, s.before, "the connection")
}

// groupSize is how many subflows from id's local address are on a trial
// that started at start (as the last round left them: a member that has
// gone counts until the next round).
func (p *shaper) groupSize(id SubflowID, start time.Time) int {
	return p.groups[trialGroup{id.Local.Addr(), start}]
}

// judgeGroups ends the group trials (see judge) whose every subflow has
// had its period; the verdicts show in the next round's actions.
func (p *shaper) judgeGroups(now time.Time) {
	type member struct {
		st *shapeConn
		s  *shapeSub
	}
	groups := map[trialGroup][]member{}
	for _, st := range p.conns {
		for id, s := range st.subs {
			if s.state == shTrial {
				k := trialGroup{id.Local.Addr(), s.trialStart}
				groups[k] = append(groups[k], member{st, s})
			}
		}
	}
	for k, ms := range groups {
		if len(ms) < 2 {
			continue
		}
		var during, before float64
		for _, m := range ms {
			if !m.s.judged {
				during = -1
				break
			}
			during, before = during+m.s.during, before+m.s.before
		}
		if during < 0 {
			continue
		}
		for _, m := range ms {
			m.st.trial = SubflowID{}
			p.verdict(now, m.s, during, before, fmt.Sprintf("the %d connections on trial from %s", len(ms), k.addr))
		}
	}
}

// verdict ends a trial: what who delivered with the subflow against
// without it.
func (p *shaper) verdict(now time.Time, s *shapeSub, during, before float64, who string) {
	s.judged = false
	if during >= (1+float64(p.Gain))*before {
		// (A path the main path was seen waiting on keeps its longer
		// wait: a trial among many connections can pass on noise.)
		s.state, s.retry = shFree, p.Retry<<min(s.heldAsides, 4)
		s.why = fmt.Sprintf("passed its trial: %s delivered %s with it, %s without", who, mbit(during), mbit(before))
		return
	}
	p.setAside(now, s, fmt.Sprintf("failed its trial: %s delivered %s with it, %s without", who, mbit(during), mbit(before)))
}

// setAside makes a subflow backup until its next trial.
func (p *shaper) setAside(now time.Time, s *shapeSub, why string) {
	s.state, s.nextTrial, s.held = shAside, now.Add(s.retry), recentRates{}
	s.why = fmt.Sprintf("set aside (%s); next trial in %s", why, s.retry)
	s.retry = min(2*s.retry, 16*p.Retry)
}

func indexOfSubflow(c *Conn, id SubflowID) int {
	for i, sf := range c.Subflows {
		if ID(sf) == id {
			return i
		}
	}
	return 0
}

// forget drops connections that are gone.
func (p *shaper) forget(live map[uint32]bool) {
	for tok := range p.conns {
		if !live[tok] {
			delete(p.conns, tok)
		}
	}
}

// recentRates keeps rates over a window of time, for their median.
type recentRates struct {
	at []time.Time
	v  []float64
}

func (r *recentRates) add(now time.Time, v float64, window time.Duration) {
	r.at, r.v = append(r.at, now), append(r.v, v)
	i := 0
	for i < len(r.at)-1 && now.Sub(r.at[i]) > window {
		i++
	}
	r.at, r.v = r.at[i:], r.v[i:]
}

// mean is the rates' mean (0: none).
func (r *recentRates) mean() float64 {
	if len(r.v) == 0 {
		return 0
	}
	var sum float64
	for _, v := range r.v {
		sum += v
	}
	return sum / float64(len(r.v))
}

// span is the time its values cover.
func (r *recentRates) span() time.Duration {
	if len(r.at) == 0 {
		return 0
	}
	return r.at[len(r.at)-1].Sub(r.at[0])
}

func (r *recentRates) median() float64 {
	if len(r.v) == 0 {
		return 0
	}
	return stats.Float64s(r.v, 0.5)[0]
}
