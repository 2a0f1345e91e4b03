package policy

import (
	"fmt"
	"net/netip"
	"slices"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// Holding the other paths while the preferred one is out. While a
// connection that carried on its preferred path has no preferred subflow
// viable (an outage), its other subflows carry the data, and the
// congestion control fills their path's queue: BBR's window is twice the
// path's bandwidth-delay product, and on the lab's paths of the paper
// (prefer-outage.yaml) the other path's smoothed RTT went from its 80 ms
// minimum to 150 ms over a five-second outage. All of that is in flight
// when a fresh subflow on the preferred path takes over, and is carried
// and acknowledged on the other path after it: bytes the user did not want
// there, at the moment the preferred path is back. So once the outage has
// lasted holdWarmup, an other subflow whose path shows a queue is capped
// at the upper quartile of the delivery rates the kernel gave while it
// carried with that queue (only then is what it delivers its path's rate;
// before the queue shows, it is its congestion control's ramp-up from the
// idle of a backup subflow; with every sample of the first second
// counted, the cap came out at about half the path's rate in 1 outage of
// 15 at 9f6a474). A delivery rate sample is at most about the path's
// rate (the kernel takes the longer of the send and the ACK interval),
// and comes out under it wherever the path is not what holds the subflow
// back: an ACK that comes late, or BBR's ProbeRTT (four segments in
// flight for 200 ms), due as a backup takes over after ten seconds
// without a lower RTT. From five to ten samples the median (the cap
// before) was one of those in 4 of the 30 outages of prefer-outage and
// prefer-ifdown-join in the runs of 0351a1c, a quarter to a half under
// the path's rate; the upper quartile needs only a quarter of the
// samples at the rate. Bytes acknowledged over the time from the first
// sample with a queue came out lower still (1091b5d, reverted): an idle
// backup keeps the smoothed RTT it last had, and the span began
// there, before the path was full. Paced at the rate
// its path drains (pacing counts the TCP header, the delivery rate only
// the payload, so the cap paces a few percent below the path's rate),
// its queue drains, and little more than one bandwidth-delay product is
// left in flight. The cap is lifted as soon as
// a preferred subflow is viable again, and after holdFor: a long outage
// lets the other path's congestion control probe for more again.
//
// When a fresh subflow on the preferred path answers (its SYN/ACK), it
// may not carry before its join completes, a round trip later (the
// fourth ACK); until then MPTCP's scheduler has nothing else than the
// other subflows, backup as they are, and hands them a round trip of
// data more. So while a chosen preferred subflow's join is incomplete,
// the held subflows are capped at a tenth of their cap (holdJoinShare):
// what they would have carried waits a round trip for the preferred
// path. At most holdJoinMax: a join that does not complete by then
// gives the others their cap back.
//
// What MPTCP has queued, unsent, on a held subflow when the preferred
// path takes over goes out on it all the same (MPTCP does not take back
// what it gave a subflow), up to TCP_NOTSENT_LOWAT and one of its chunks
// more: on the paper's paths, 25 to 45 KB after each return, most of the
// share the preferred path missed. So a held subflow's TCP_NOTSENT_LOWAT
// is what its cap sends in holdQueue while the hold lasts (on those
// paths less than a segment: MPTCP hands it more only once it sent what
// it had); its own value comes back with the lifting.
//
// A subflow without a queue (an application that sends less than the
// path carries, where the delivery rate is the application's) is left
// alone; so is a connection that never carried on its preferred path (it
// started elsewhere, and its other subflows are still ramping up).

const (
	// holdWarmup: the outage's first second, in which the other paths
	// take over the data and their rate is measured.
	holdWarmup = time.Second
	// holdFor: the cap is lifted after this much of an outage.
	holdFor = 10 * time.Second
	// holdSamples: the cap is the upper quartile of up to this many delivery
	// rate samples (the latest), taken while the subflow carried with a
	// queue on its path.
	holdSamples = 10
	// holdMinSamples: no cap from fewer samples than this.
	holdMinSamples = 5
	// holdJoinShare: the held subflows' share of their cap while a
	// preferred join completes; holdJoinMax: for at most this long.
	holdJoinShare = 10
	holdJoinMax   = time.Second
	// holdQueue, holdQueueMin: a held subflow's TCP_NOTSENT_LOWAT is what
	// its cap sends in holdQueue, at least holdQueueMin (below a segment:
	// MPTCP gives the subflow more only once it sent what it had).
	holdQueue    = 2 * time.Millisecond
	holdQueueMin = 1
)

// holdState is one other subflow of a connection in an outage.
type holdState struct {
	rates   []uint64  // delivery rate samples while carrying with a queue, bytes/s
	last    time.Time // when the last sample taken was sampled
	acked   uint64    // its bytes acknowledged at that sample
	cap     uint64    // bytes/s; 0: not capped (yet)
	capWhen time.Duration
}

// eventOnly tells whether the daemon knows the subflow only from the path
// manager's establishment event (the daemon's view adds it so, between
// samples): no sample has shown it yet, so it has no socket cookie, no
// RTT and no MPTCP flags, and whether its join completed is not known.
// An establishment event of a join comes with its SYN/ACK, a round trip
// before the join completes. Taken as complete, it ended the outage at
// the SYN/ACK and lifted the hold instead of holding back: in the
// interface-down returns of a743e9b and cd6d30b, whenever no sample had
// shown the join's SYN in flight (7 of 15 returns on prefer-ifdown, 10
// of 15 on prefer-ifdown-rtt40).
func eventOnly(sf observe.Subflow) bool { return sf.Cookie == 0 && sf.SRTT == 0 }

// holdsQueue says whether the subflow's path holds a queue of it: its
// smoothed RTT a quarter above its minimum or more (a lower bar than the
// startup guard's queued: here the queue itself is what costs).
func holdsQueue(sf observe.Subflow) bool {
	return sf.MinRTT > 0 && sf.SRTT >= sf.MinRTT+sf.MinRTT/4
}

// endOutage forgets the outage: a preferred subflow is viable.
func (st *preferConn) endOutage() {
	st.everActive = true
	st.clearOutage()
}

// clearOutage forgets the outage and what was held in it.
func (st *preferConn) clearOutage() {
	st.outage, st.hold, st.joinSeen = time.Time{}, nil, time.Time{}
}

// holdOthers returns the caps of the connection's other subflows while no
// preferred subflow is viable, or (joining) while the one chosen
// completes its join (see above). sampled is when the figures were read
// (zero: now).
func (p *Prefer) holdOthers(now, sampled time.Time, c *Conn, st *preferConn, rank map[netip.Addr]int, joining bool) []Action {
	if !p.HoldOthers || !st.everActive {
		return nil
	}
	switch {
	case !joining:
		st.joinSeen = time.Time{}
	case st.joinSeen.IsZero():
		st.joinSeen = now
	}
	holdBack := joining && now.Sub(st.joinSeen) < holdJoinMax
	if st.outage.IsZero() {
		st.outage, st.hold = now, map[SubflowID]*holdState{}
	}
	out := now.Sub(st.outage)
	if out >= holdFor {
		return nil // lifted
	}
	at := sampled
	if at.IsZero() {
		at = now
	}
	var acts []Action
	for _, sf := range c.Subflows {
		if _, pref := rank[sf.Local.Addr()]; pref {
			continue
		}
		id := ID(sf)
		h := st.hold[id]
		if h == nil {
			h = &holdState{last: at, acked: sf.BytesAcked}
			st.hold[id] = h
			continue // its figures so far are from before the outage
		}
		if h.cap == 0 {
			if at.After(h.last) {
				if sf.BytesAcked > h.acked && sf.DeliveryRate > 0 && holdsQueue(sf) {
					h.rates = append(h.rates, sf.DeliveryRate)
					if len(h.rates) > holdSamples {
						h.rates = h.rates[1:]
					}
				}
				h.last, h.acked = at, sf.BytesAcked
			}
			if out < holdWarmup || len(h.rates) < holdMinSamples || !holdsQueue(sf) {
				continue
			}
			h.cap, h.capWhen = upperQuartile(h.rates), out
		}
		notsent := units.Size(max(h.cap*uint64(holdQueue)/uint64(time.Second), holdQueueMin))
		if holdBack {
			acts = append(acts, Action{Kind: Limit, Token: c.Token, Subflow: id, Rate: units.Rate(max(h.cap/holdJoinShare, 1) * 8), NotSent: notsent,
				Reason: fmt.Sprintf("a preferred subflow answered and completes its join: held to a tenth of its cap for that round trip (at most %s), so that what it would carry waits for the preferred path", holdJoinMax)})
			continue
		}
		acts = append(acts, Action{Kind: Limit, Token: c.Token, Subflow: id, Rate: units.Rate(h.cap * 8), NotSent: notsent,
			Reason: fmt.Sprintf("no preferred subflow viable for %s: held to what its path delivered (upper quartile of %d samples), %s of it queued unsent at most, so that its queue drains before the preferred path is back; lifted then, or %s into the outage",
				h.capWhen.Round(time.Millisecond), len(h.rates), notsent, holdFor)})
	}
	return acts
}

// upperQuartile of the samples: the one a quarter of them are at or above.
func upperQuartile(v []uint64) uint64 {
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)*3/4]
}
