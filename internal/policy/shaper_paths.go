package policy

import (
	"fmt"
	"math"
	"strings"
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

// entryRTT is an RTT for telling near joiners from far ones: under 10 ms
// what a path's data wait in its own queue is of the same order as its
// RTT (BBR keeps at least 4 packets in flight, most often 10: a path of
// no delay at 10 Mbit/s ran at 12 ms), so ratios of such RTTs say nothing
// about what a joiner's data lag behind (bench twopath-short: beside a
// path of no delay, joiners at 20 and 50 ms were far, waited 2 s for a
// trial and failed it, and dynthresh delivered a third to two thirds of
// default MPTCP's rate; results.md, twopath-short). Not for far (see
// flooredRTT): caps and the waited-on rule still see a few ms apart.
func entryRTT(rtt time.Duration) time.Duration { return max(rtt, 10*time.Millisecond) }

// nearJoin tells whether a joining subflow is as near as the paths in
// use: its RTT (from its handshake) within EntryFactor of theirs (see
// entryRTT).
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
	return best > 0 && float64(entryRTT(rtt)) <= p.EntryFactor*float64(entryRTT(best))
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

// pathLag is how far what a far path carries lags the main path's: the
// time from a byte sent on it to its DATA_ACK returning over the main
// path, about the mean of the two base RTTs.
func pathLag(sf, main observe.Subflow) time.Duration { return (baseRTT(sf) + baseRTT(main)) / 2 }

// mainCapacity is what the main path can carry, for the in-time gate: the
// most of its median over 3 s, its last second and its best second of the
// last 30 s (what it carries while a far path holds it up is no measure).
func (p *shaper) mainCapacity(r *shapeRound) float64 {
	c := math.Max(r.mainNow, r.cur[r.mainID])
	if b, ok := r.ms.best.get(); ok {
		c = math.Max(c, b)
	}
	return c
}

// mainKnown tells whether the main path has carried long enough for its
// rate to be known: past its warm-up, a full second.
func (r *shapeRound) mainKnown() bool { return !r.warming && r.now.Sub(r.ms.seen) >= time.Second }

// noRoom tells whether the main path, at what it can carry, fills the
// window planned for within the lag of the far path sf with Gain to spare
// (nothing sf carries arrives in time), and why.
func (p *shaper) noRoom(r *shapeRound, sf observe.Subflow) (string, bool) {
	c, lag := p.mainCapacity(r), pathLag(sf, r.main)
	if r.wnd == 0 || c*(1+float64(p.Gain))*lag.Seconds() < float64(p.Headroom)*float64(r.wnd) {
		return "", false
	}
	return fmt.Sprintf("no room: the main path's %s alone fills %.0f%% of the %s window within the %s its data lags",
		mbit(c), float64(p.Headroom)*100, units.Size(r.wnd), fmtMs(lag)), true
}

// noGainInTime tells whether, under a loss-based congestion control on
// the main path, the in-time model lets the far path sf carry less than
// the Gain it would have to add (inTimeRate below Gain × the main path's
// rate), and why: its entry would cost more than it can give. What a far
// path carries early holds the main path's data at the receiver, the main
// path's window drains and its CUBIC/Reno sender loses a burst; it then
// grows its window back over seconds, where BBR is at rate again within a
// few RTTs (ecf-50-10-1m under CUBIC, one run: a 10 Mbit/s path entered
// for 2 s, the connection fell from 47 Mbit/s to under 5 for those 2 s
// and was back at rate 7 s later). Under BBR the trials and the safety
// net decide, as the model is conservative there (ecf-50-50-1m: the model
// lets nothing in time, default MPTCP gains 13% over TCP).
func (p *shaper) noGainInTime(r *shapeRound, sf observe.Subflow) (string, bool) {
	if !lossBasedCC(r.main.CC) || r.wnd == 0 {
		return "", false
	}
	c, in := p.mainCapacity(r), p.inTimeBeside(r, sf)
	if in >= float64(p.Gain)*c {
		return "", false
	}
	return fmt.Sprintf("no gain in time: beside the main path's %s (%s, loss-based) at most %s of it arrives in time within %.0f%% of the %s window, less than the %.0f%% it would have to add",
		mbit(c), r.main.CC, mbit(in), float64(p.Headroom)*100, units.Size(r.wnd), float64(p.Gain)*100), true
}

// lossBasedCC tells whether a congestion control (as the kernel names
// it) backs off on loss and regrows its window slowly: every one but BBR.
// An unknown one ("") is not taken as loss-based.
func lossBasedCC(cc string) bool { return cc != "" && !bbrCC(cc) }

// bbrCC tells whether a congestion control is BBR (any version: "bbr",
// "bbr2", "bbr3" out of tree).
func bbrCC(cc string) bool { return strings.HasPrefix(cc, "bbr") }

// fitsInTime tells whether the in-time model lets a far path carry what it
// has carried beside what the main path can carry (see inTimeRate).
func (p *shaper) fitsInTime(r *shapeRound, sf observe.Subflow, s *shapeSub) bool {
	return p.inTimeBeside(r, sf) >= s.capacity(sf)
}

// inTimeBeside is what the in-time model lets sf carry beside the main
// path at what it can carry, within Headroom of the window (bytes/s).
func (p *shaper) inTimeBeside(r *shapeRound, sf observe.Subflow) float64 {
	return inTimeRate(float64(p.Headroom)*float64(r.wnd), pathLag(sf, r.main), p.mainCapacity(r))
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
