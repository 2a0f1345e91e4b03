package policy

import (
	"fmt"
	"math"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// shape decides one connection: the actions and its status. Its steps
// run in this order, each on what the ones before left in the round:
// what the subflows and the connection carry (measure), the main path
// (pickMain), where joiners go (placeJoiners), the entries that end
// (endEntries), the far paths the main path waits on (setAsideWaitedOn)
// and those with no room (setAsideNoRoom), the safety net (safetyNet),
// the trial that ends or starts (judgeOrStartTrial), the far paths that
// rest through BBR's ProbeRTT (restThroughProbeRTT), and what each
// subflow may carry (decisions).
func (p *shaper) shape(now time.Time, c *Conn) ([]Action, ShapeConnStatus) {
	r := p.measure(now, c)
	cs := ShapeConnStatus{Token: fmt.Sprintf("%08x", c.Token), WindowB: r.wnd, AggregateMbit: r.agg * 8 / 1e6}
	if len(c.Subflows) < 2 {
		r.onlyPath()
		return nil, cs
	}
	p.pickMain(r)
	cs.Main, cs.MainMbit = r.mainID.String(), r.mainNow*8/1e6
	p.placeJoiners(r)
	p.endEntries(r)
	p.setAsideWaitedOn(r)
	p.setAsideNoRoom(r)
	p.safetyNet(r)
	p.judgeOrStartTrial(r)
	p.restThroughProbeRTT(r)
	var out []Action
	out, cs.Subflows = p.decisions(r)
	return out, cs
}

// shapeRound is one connection's round, handed from step to step: what
// measure found, and the main path once pickMain has chosen it.
type shapeRound struct {
	now time.Time
	c   *Conn
	st  *shapeConn
	// cur is each subflow's rate over its last second (bytes/s).
	cur map[SubflowID]float64
	// agg is what the connection delivered in order over its last second
	// (aggFull: a whole second of it), in bytes/s.
	agg     float64
	aggFull bool
	// wnd is the receive window planned for, in bytes.
	wnd uint64
	// The main path and its state; mainNow is what it carries now (its
	// median over 3 s, without 1 s spikes); warming: it is the initial
	// subflow, still in its warm-up.
	main    observe.Subflow
	mainID  SubflowID
	ms      *shapeSub
	mainNow float64
	warming bool
}

// measure updates what each subflow and the connection carry, meets the
// subflows that joined and forgets those that are gone.
func (p *shaper) measure(now time.Time, c *Conn) *shapeRound {
	st := p.conns[c.Token]
	if st == nil {
		st = &shapeConn{subs: map[SubflowID]*shapeSub{}}
		p.conns[c.Token] = st
	}
	r := &shapeRound{now: now, c: c, st: st, cur: map[SubflowID]float64{}}
	var wnd uint64
	var sum float64
	present := map[SubflowID]bool{}
	for _, sf := range c.Subflows {
		id := ID(sf)
		present[id] = true
		s := st.subs[id]
		if s == nil {
			s = p.joined(c, sf, now)
			st.subs[id] = s
		}
		rate, full := s.acked.over(now, sf.BytesAcked, time.Second)
		r.cur[id], sum = rate, sum+rate
		s.recent.add(now, rate, 3*time.Second)
		if full && s.state != shAside {
			s.best.add(now, rate, 30*time.Second)
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
	r.agg, r.aggFull = st.agg.over(now, bytes, time.Second)
	if bytes == 0 {
		r.agg, r.aggFull = sum, true
	}
	st.recent.add(now, r.agg, 3*time.Second)
	r.wnd = uint64(st.wnd.add(now, float64(wnd), 3*time.Second))
	if p.Window > 0 {
		r.wnd = uint64(p.Window)
	}
	return r
}

// joined is the state of a subflow seen for the first time: the
// connection's first path is free; any other is aside until placeJoiners
// places it, once the main path is known.
func (p *shaper) joined(c *Conn, sf observe.Subflow, now time.Time) *shapeSub {
	s := &shapeSub{seen: now, initial: sf.LocalID == 0 && (!c.Local.IsValid() || sf.Local == c.Local),
		state: shAside, retry: p.Retry, why: "joined: aside until its trial"}
	if s.initial || len(c.Subflows) == 1 {
		s.state, s.why = shFree, "the connection's first path"
	} else if baseRTT(sf) == 0 {
		// Known from an event only: its RTT shows with the next
		// sample (a far path must not carry anything meanwhile).
		s.why = "joined: aside until its RTT is known"
	}
	return s
}

// onlyPath frees the subflow of a connection that has one.
func (r *shapeRound) onlyPath() {
	for _, sf := range r.c.Subflows {
		if s := r.st.subs[ID(sf)]; s.state != shFree {
			s.state, s.why = shFree, "the connection's only path"
		}
	}
}

// pickMain chooses the main path: the one that carries the most lately
// (its median over 3 s; a warming initial subflow stays it). Not its best
// of 30 s: a path that has just turned bad would stay main, and the
// safety net would set the good one aside.
func (p *shaper) pickMain(r *shapeRound) {
	now, c, st := r.now, r.c, r.st
	main := c.Subflows[0]
	best := -1.0
	for _, sf := range c.Subflows {
		s := st.subs[ID(sf)]
		if s.initial && now.Sub(s.seen) < time.Duration(p.WarmupRTTs*float64(max(sf.SRTT, time.Millisecond))) {
			main, best = sf, math.Inf(1)
		}
		if rate := s.carrying(sf); s.state != shAside && rate > best {
			main, best = sf, rate
		}
	}
	r.main, r.mainID = main, ID(main)
	r.ms = st.subs[r.mainID]
	// Trials wait until the initial path has warmed up (and carried for
	// half a second): before that, "without it" is not a baseline.
	r.warming = r.ms.initial && now.Sub(r.ms.seen) < max(500*time.Millisecond, time.Duration(p.WarmupRTTs*float64(max(main.SRTT, time.Millisecond))))
	r.mainNow = r.ms.recent.median()
	if r.ms.state != shFree {
		r.ms.state, r.ms.why = shFree, "main path"
	}
}

// placeJoiners places the joiners not yet placed: near ones enter, far
// ones wait for their trial (a far joiner's trial stalls the connection
// for about its RTT: its first waits FarTrialRTTs of them, so that a
// short transfer never pays for it). A near joiner carries from the
// start, as MPTCP would have it, and is judged by its share after its
// entry period; but one NearerFactor× nearer than a main path that still
// warms up waits for the warm-up to end: MPTCP's scheduler would give it
// the data first and starve the main path's slow start (a 4 ms, 4 Mbit/s
// joiner beside a 400 ms, 400 Mbit/s path slowed its ramp by 2 s).
func (p *shaper) placeJoiners(r *shapeRound) {
	now, c, st, main := r.now, r.c, r.st, r.main
	for _, sf := range c.Subflows {
		s := st.subs[ID(sf)]
		if s.state != shAside || !s.nextTrial.IsZero() || baseRTT(sf) == 0 || ID(sf) == r.mainID {
			continue
		}
		if p.nearJoin(st, c, sf) {
			// (Under the in-time gate a far one waits until the main
			// path's rate is known, and enters only where there is room:
			// what it carried before that held the main path's ramp up.)
			if p.InTimeGate && p.far(sf, main) {
				if !r.mainKnown() {
					s.why = "joined far: aside until the main path's rate is known"
					continue
				}
				if why, no := p.noRoom(r, sf); no {
					p.setAside(now, s, why)
					continue
				}
				if why, no := p.noGainInTime(r, sf); no {
					p.setAside(now, s, why)
					continue
				}
			}
			if r.warming && p.NearerFactor > 0 && float64(entryRTT(baseRTT(sf)))*p.NearerFactor < float64(baseRTT(main)) {
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
}

// endEntries ends the entries that are over (after the main path's
// warm-up too): the joiner stays if it carried SlowShare of what the main
// path did meanwhile.
func (p *shaper) endEntries(r *shapeRound) {
	now, st, main, ms := r.now, r.st, r.main, r.ms
	for _, sf := range r.c.Subflows {
		s := st.subs[ID(sf)]
		if s.state != shEntry || ID(sf) == r.mainID {
			continue
		}
		if sf.Backup() {
			// The kernel has not made it usable yet (its MP_PRIO is still
			// to go out): its entry starts when it can carry.
			s.startEntry(now, sf, main)
			continue
		}
		if sf.BytesAcked <= s.entryBytes+1 && sf.Unacked == 0 {
			// MPTCP's scheduler has given it nothing yet (the main path
			// still has room in its window, or the sender is idle): there
			// is nothing to judge, and "carried 0% in its first 184 ms"
			// would set aside a path never tried (seen in CI over two
			// equal veths). Its entry starts with its first data.
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
		mainRate := math.Max(float64(main.BytesAcked-min(s.mainBytes, main.BytesAcked))/elapsed, r.cur[r.mainID])
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
		if (now.Before(s.entryUntil) || r.warming) && !early {
			continue
		}
		// At a rate under Gain of the main path's it could not add the
		// gain a trial asks for.
		canAdd := rate >= float64(p.Gain)*math.Max(r.mainNow, mainRate)
		if share < float64(p.SlowShare) && !early && p.InTimeGate && canAdd && p.inTimeBeside(r, sf) >= rate {
			// Less than SlowShare, but it adds Gain and the in-time model
			// says what it carries arrives in time: setting it aside would
			// give up a gain default MPTCP keeps (ecf-50-10-256m under
			// CUBIC: a 10 Mbit/s path beside 47, 21%, set aside, then
			// failed every trial mid-way through its first lag).
			s.state = shFree
			s.why = fmt.Sprintf("carried %.0f%% of the main path's rate in its first %s: under slow_share, but it adds %s and arrives in time",
				100*share, fmtMs(now.Sub(s.seen)), mbit(rate))
			continue
		}
		if share < float64(p.SlowShare) {
			why := fmt.Sprintf("it carried %s in its first %s, %.0f%% of the main path's %s",
				mbit(rate), fmtMs(now.Sub(s.seen)), 100*share, mbit(mainRate))
			// One that cannot add Gain waits the longest for its trials
			// (each costs).
			if !canAdd {
				s.retry = 16 * p.Retry
				why += fmt.Sprintf("; it cannot add %.0f%%", 100*float64(p.Gain))
			}
			p.setAside(now, s, why)
		} else {
			s.state = shFree
			s.why = fmt.Sprintf("carried %.0f%% of the main path's rate in its first %s", 100*share, fmtMs(now.Sub(s.seen)))
		}
	}
}

// setAsideWaitedOn sets aside the far paths the main path waits on (see
// HeldShare).
func (p *shaper) setAsideWaitedOn(r *shapeRound) {
	if !(float64(p.HeldShare) > 0 && !r.warming) {
		return
	}
	main := r.main
	for _, sf := range r.c.Subflows {
		s, id := r.st.subs[ID(sf)], ID(sf)
		if id == r.mainID || !(s.state == shEntry || s.state == shFree || s.state == shCapped) || !p.far(sf, main) {
			continue
		}
		waited := 0.0
		if main.Cwnd > 10 && 4*main.Unacked < main.Cwnd && sf.Unacked > 0 {
			waited = 1
		}
		s.held.add(r.now, waited, 3*time.Second)
		// (1 s of it for a path the in-time model says cannot carry its
		// rate in time: every round it stays costs.)
		need := 2 * time.Second
		if p.InTimeGate && !p.fitsInTime(r, sf, s) {
			need = time.Second
		}
		if s.held.span() >= need && s.held.mean() >= float64(p.HeldShare) {
			s.heldAsides++
			p.setAside(r.now, s, fmt.Sprintf("the main path sat idle while it held data in %.0f%% of the last %s: the connection waited on it",
				100*s.held.mean(), fmtMs(s.held.span())))
		}
	}
}

// setAsideNoRoom sets aside (InTimeGate) the far paths that carry where
// the main path alone fills the window within their lag, once the main
// path has carried for a second.
func (p *shaper) setAsideNoRoom(r *shapeRound) {
	if !p.InTimeGate || !r.mainKnown() {
		return
	}
	for _, sf := range r.c.Subflows {
		s, id := r.st.subs[ID(sf)], ID(sf)
		if id == r.mainID || !(s.state == shEntry || s.state == shFree || s.state == shCapped) || !p.far(sf, r.main) {
			continue
		}
		if why, no := p.noRoom(r, sf); no {
			p.setAside(r.now, s, why)
		}
	}
}

// safetyNet: when the connection delivers less than without its other
// paths (what it did before the last trial, or its main path's level, the
// best 3 s median of the last 30 s) for a second (and 2 RTTs of the main
// path), the slowest free subflow goes aside (one per round). It pauses
// around the main path's ProbeRTT (ProbeRTTPause).
func (p *shaper) safetyNet(r *shapeRound) {
	now, st := r.now, r.st
	if p.ProbeRTTPause && bbrCC(r.main.CC) && r.main.Cwnd <= 4 {
		st.probeRTT = now
	}
	// (A ProbeRTT of 200 ms empties the main path for about 300: a 1 s
	// window that holds it is 30% down. In ecf-50-10-1m that set aside a
	// slow path that added 2–4 Mbit/s to 47.)
	if !st.probeRTT.IsZero() && now.Sub(st.probeRTT) < time.Second+r.main.SRTT {
		st.below = time.Time{}
		return
	}
	alone := st.alone
	if alone == 0 {
		alone = r.ms.level.max()
	}
	if !(r.aggFull && r.agg < (1-float64(p.Margin))*alone && !r.warming) {
		st.below = time.Time{}
		return
	}
	if st.below.IsZero() {
		st.below = now
	}
	if now.Sub(st.below) < max(time.Second, 2*r.main.SRTT) {
		return
	}
	// The one that delivers least now (its last second).
	var worst *shapeSub
	var worstID SubflowID
	for _, sf := range r.c.Subflows {
		s, id := st.subs[ID(sf)], ID(sf)
		if id != r.mainID && (s.state == shFree || s.state == shCapped || s.state == shEntry) && (worst == nil || r.cur[id] < r.cur[worstID]) {
			worst, worstID = s, id
		}
	}
	if worst != nil {
		p.setAside(now, worst, fmt.Sprintf("the connection delivered %s in order, below the %s it did without it", mbit(r.agg), mbit(alone)))
		st.below = now
	}
}

// judgeOrStartTrial ends the trial that is running when its period is
// over (judge), or starts the one that is due.
func (p *shaper) judgeOrStartTrial(r *shapeRound) {
	now, st := r.now, r.st
	if t := st.subs[st.trial]; t != nil {
		p.judge(now, st, t, r.c)
	}
	if st.trial != (SubflowID{}) || r.warming {
		return
	}
	for _, sf := range r.c.Subflows {
		s := st.subs[ID(sf)]
		if p.InTimeGate && s.nextTrial.IsZero() && !r.mainKnown() {
			continue // a joiner not placed yet (see placeJoiners)
		}
		// (Only while the connection delivers at its level: a trial
		// against a ramping or recovering baseline would pass anything.)
		if s.state == shAside && !now.Before(s.nextTrial) && p.trialDue(now, ID(sf).Local.Addr()) && st.recent.median() > 0 && st.recent.median() >= (1-float64(p.Margin))*r.ms.level.max() {
			st.trial = ID(sf)
			// Without it: what the connection delivered lately, at least
			// what its main path alone carries (the last seconds may
			// still hold the damage of its last turn).
			s.state, s.trialStart, s.before, s.mark, s.markAt = shTrial, now, math.Max(st.recent.median(), r.mainNow), 0, time.Time{}
			st.alone = s.before
			s.why = fmt.Sprintf("on trial: passes if the connection delivers %.0f%% more than the %s it did without it", float64(p.Gain)*100, mbit(s.before))
			return
		}
	}
}

// decisions says what each subflow may carry: its backup flag and, on a
// far path that is not aside, the in-time cap (see inTimeRate), or the
// startup guard's where that is lower (shaper_guard.go); and its status.
func (p *shaper) decisions(r *shapeRound) ([]Action, []ShapeSubflowStatus) {
	var out []Action
	var status []ShapeSubflowStatus
	// Each subflow's state first (the in-time cap moves it, the gate notes
	// its hold, markCarry when it may carry), then the caps: the startup
	// guard asks every other subflow whether it is young.
	rates := make([]units.Rate, len(r.c.Subflows))
	for i, sf := range r.c.Subflows {
		s := r.st.subs[ID(sf)]
		if ID(sf) != r.mainID && s.state != shAside && p.InTimeCaps && p.far(sf, r.main) {
			rates[i] = p.inTimeCap(r, sf, s)
		}
		p.gate(r, sf, s)
		markCarry(r.now, s)
	}
	for i, sf := range r.c.Subflows {
		id := ID(sf)
		s := r.st.subs[id]
		rtt := baseRTT(sf)
		ss := ShapeSubflowStatus{Subflow: id.String(), RTTMs: float64(rtt) / 1e6, RateMbit: r.cur[id] * 8 / 1e6,
			BestMbit: s.capacity(sf) * 8 / 1e6}
		rate := rates[i]
		why := s.why
		if g, gwhy := p.startupGuard(r, sf, s); g > 0 && (rate == 0 || g < rate) {
			rate, why = g, why+"; "+gwhy
		}
		backup, reason := s.state == shAside, s.why
		if rest := s.resting(r.now); rest != "" {
			backup, reason, why = true, rest, why+"; "+rest
		}
		ss.State, ss.Cap, ss.Why, ss.WaitedPct = s.state, RateText(rate), why, 100*s.held.mean()
		out = append(out, Action{Kind: Backup, Token: r.c.Token, Subflow: id, Backup: backup, Reason: reason},
			Action{Kind: Limit, Token: r.c.Token, Subflow: id, Rate: rate, Reason: why})
		status = append(status, ss)
	}
	return out, status
}

// inTimeCap is what arrives in time on a far path (0: no cap), and moves
// it between free and capped.
func (p *shaper) inTimeCap(r *shapeRound, sf observe.Subflow, s *shapeSub) units.Rate {
	lag := pathLag(sf, r.main)
	inTime := inTimeRate(float64(p.Headroom)*float64(r.wnd), lag, r.mainNow)
	switch {
	case inTime < burst/lag.Seconds():
		// The model says nothing fits; what the connection delivers
		// decides (its trial, the safety net).
		if s.state == shCapped {
			s.state = shFree
		}
	case inTime < s.capacity(sf) || s.state == shTrial:
		if s.state == shFree {
			s.state = shCapped
		}
		s.why = fmt.Sprintf("in time: (main %s + this) × lag %s within %.0f%% of the %s window",
			mbit(r.mainNow), fmtMs(lag), float64(p.Headroom)*100, units.Size(r.wnd))
		return roundRate(units.Rate(inTime * 8))
	case s.state == shCapped:
		s.state = shFree
	}
	return 0
}
