package policy

import (
	"fmt"
	"net/netip"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// The shaper's trials: when one is due, how it is judged, and the trials
// of one local address started and judged together (see shaper).

// trialHold is what holds an address's trials back (shaper.held).
type trialHold struct {
	until   time.Time
	running bool
	// gated: one aside subflow from it is held by the in-time gate (under
	// the kernel path manager a trial would put it back to work too).
	gated bool
}

// trialDue tells whether every aside subflow from addr is due for its
// trial, none is held by the in-time gate, and none from it is on trial
// since an earlier round.
func (p *shaper) trialDue(now time.Time, addr netip.Addr) bool {
	h := p.held[addr]
	return !h.running && !h.gated && !now.Before(h.until)
}

// gate keeps the in-time gate of a subflow (see shaper, InTimeGate): the
// first round it is aside, it records the window and the main path's
// rate, and whether the model says it cannot carry its rate in time;
// while it is aside and unfit, its trials wait until either has changed
// by a quarter (the main path's rate fallen to three quarters of what it
// could carry), or for the longest retry (16× Retry): what the model does
// not see may have changed too.
func (p *shaper) gate(r *shapeRound, sf observe.Subflow, s *shapeSub) {
	if s.state != shAside {
		s.gateSet, s.unfit, s.gateHeld = false, false, false
		return
	}
	if !s.gateSet {
		s.gateSet, s.gateAt, s.gateWnd, s.gateMain = true, r.now, r.wnd, p.mainCapacity(r)
		s.unfit = p.InTimeGate && ID(sf) != r.mainID && p.far(sf, r.main) && r.mainKnown() && r.wnd > 0 && !p.fitsInTime(r, sf, s)
		if s.unfit {
			s.why += fmt.Sprintf("; the in-time model says it cannot carry its %s in time: it waits until the %s window or the main path's %s changes by a quarter (at most %s)",
				mbit(s.capacity(sf)), units.Size(r.wnd), mbit(s.gateMain), 16*p.Retry)
		}
	}
	s.gateHeld = s.unfit && float64(r.wnd) < 1.25*float64(s.gateWnd) && r.mainNow > 0.75*s.gateMain && r.now.Sub(s.gateAt) < 16*p.Retry
}

// trialGroup is the trials from one local address that started in one
// round.
type trialGroup struct {
	addr  netip.Addr
	start time.Time
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

// setAside makes a subflow backup until its next trial (and has its
// in-time gate recorded anew).
func (p *shaper) setAside(now time.Time, s *shapeSub, why string) {
	s.state, s.nextTrial, s.held, s.gateSet = shAside, now.Add(s.retry), recentRates{}, false
	s.why = fmt.Sprintf("set aside (%s); next trial in %s", why, s.retry)
	s.retry = min(2*s.retry, 16*p.Retry)
}
