package policy

import (
	"fmt"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// The startup guard (StartupGuard): while a subflow is young, no other
// subflow of its connection may pace far above what it delivers into a
// queue of its own.
//
// Why: a subflow's BBR leaves its startup on the bandwidth its first
// rounds showed, and under MPTCP a round in which the scheduler hands the
// subflow little counts as the path's bandwidth: the kernel marks a TCP
// socket application-limited only in sendmsg (tcp_rate_check_app_limited),
// which MPTCP's subflows never go through, so their rate samples are never
// marked. Beside a path whose BBR paces far above what it delivers, a
// joiner gets little: the scheduler hands data to the subflow with the
// least queued bytes per unit of pacing rate, and what the other path
// queues holds the connection's receive window. Seen in twopath-short's
// 5/15 Mbit/s rows with the slow path of no delay: its BBR paced its
// startup from a handshake of half a millisecond (648 Mbit/s on a 5 Mbit/s
// path), its window of 136 packets queued 294 ms, and the 15 Mbit/s joiner
// at 25 ms one way had 2 to 4 packets in flight; its BBR took about
// 1 Mbit/s for its path's bandwidth and grew back at a quarter per eight
// round trips: seconds.
//
// So while another subflow of the connection is young (for guardRTTs of
// its base RTT from the round it may first carry, within guardMin and
// guardMax), a subflow that paces at more than guardPacing× what it
// delivers and has a standing queue (SRTT above twice its minimum RTT plus
// guardQueue) is capped at guardHeadroom× the most it has delivered since:
// a queue means its path was full, so the cap takes nothing from it, and
// its queue stops growing. The cap lasts as long as a young subflow does.
const (
	guardRTTs     = 16
	guardMin      = 500 * time.Millisecond
	guardMax      = 3 * time.Second
	guardPacing   = 4
	guardQueue    = 10 * time.Millisecond
	guardHeadroom = 1.25
)

// guardPeriod is how long a subflow is young once it may carry.
func guardPeriod(sf observe.Subflow) time.Duration {
	return min(max(time.Duration(guardRTTs)*baseRTT(sf), guardMin), guardMax)
}

// youngOther is another subflow of the round's connection that is young
// (nil: none).
func (r *shapeRound) youngOther(id SubflowID) *observe.Subflow {
	for i, o := range r.c.Subflows {
		so := r.st.subs[ID(o)]
		if ID(o) != id && so.state != shAside && !so.carryFrom.IsZero() && r.now.Sub(so.carryFrom) < guardPeriod(o) {
			return &r.c.Subflows[i]
		}
	}
	return nil
}

// queued tells whether a subflow has a standing queue of its own.
func queued(sf observe.Subflow) bool {
	return sf.MinRTT > 0 && sf.SRTT > 2*sf.MinRTT+guardQueue
}

// markCarry notes from when a subflow may carry (zero while aside). The
// round marks every subflow before any guard looks for a young one, so a
// joiner listed after the subflow it guards against counts in the round it
// enters.
func markCarry(now time.Time, s *shapeSub) {
	switch {
	case s.state == shAside:
		s.carryFrom = time.Time{}
	case s.carryFrom.IsZero():
		s.carryFrom = now
	}
}

// startupGuard is the guard's cap on a subflow (0: none) and why; the
// most it delivered while held is kept in s.
func (p *shaper) startupGuard(r *shapeRound, sf observe.Subflow, s *shapeSub) (units.Rate, string) {
	id := ID(sf)
	young := r.youngOther(id)
	if !p.StartupGuard || s.state == shAside || young == nil {
		s.guard = 0
		return 0, ""
	}
	delivers := max(float64(sf.DeliveryRate), r.cur[id])
	if s.guard == 0 && (!queued(sf) || delivers <= 0 || float64(sf.PacingRate) <= guardPacing*delivers) {
		return 0, ""
	}
	s.guard = max(s.guard, delivers)
	why := fmt.Sprintf("startup guard: held to %.0f%% of the %s it delivers while %s starts (it paces %s, SRTT %s over a minimum of %s)",
		guardHeadroom*100, mbit(s.guard), ID(*young), mbit(float64(sf.PacingRate)), fmtMs(sf.SRTT), fmtMs(sf.MinRTT))
	return roundRate(units.Rate(guardHeadroom * s.guard * 8)), why
}
