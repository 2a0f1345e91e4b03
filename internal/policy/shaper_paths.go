package policy

import (
	"math"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// What the shaper makes of a path: its base RTT, whether a joiner is near
// enough to enter at once and for how long, whether a path is far, and
// what a far path can carry that arrives in time.

// burst is the most the MPTCP scheduler hands a subflow at once.
const burst = 64 << 10

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

// baseRTT is a subflow's lowest RTT (its SRTT until the kernel has one).
func baseRTT(sf observe.Subflow) time.Duration {
	if sf.MinRTT > 0 {
		return sf.MinRTT
	}
	return sf.SRTT
}

// roundRate keeps a cap to three significant digits.
func roundRate(r units.Rate) units.Rate {
	if r <= 0 {
		return 0
	}
	scale := math.Pow(10, math.Floor(math.Log10(float64(r)))-2)
	return units.Rate(math.Round(float64(r)/scale) * scale)
}
