package policy

import (
	"fmt"
	"time"

	"mpsteer/internal/observe"
)

// What the ATSSS policy measures of each access of a connection (its
// subflows on that access together), one point per sample of the
// kernel's figures: bytes acknowledged, sent and retransmitted (summed
// over the subflows, counted on even as subflows come and go), the
// smallest SRTT, whether data waited on it; and the Rel-17 threshold
// gate that takes an access out of use while its RTT or loss exceeds its
// threshold.

type meterPoint struct {
	at                   time.Time
	acked, sent, retrans uint64
	srtt                 time.Duration // smallest SRTT of the established subflows (0: none)
	limited              bool          // data waited on a subflow (see waits)
	carried              bool          // bytes were acknowledged since the last point
}

type accMeter struct {
	last   map[SubflowID][3]uint64 // each subflow's acked, sent, retrans at the last point
	cum    [3]uint64
	points []meterPoint
	mss    uint32
	// joined: when a subflow on the access was first seen (zero: none
	// yet); its slow start's losses do not count (lossWarmup).
	joined time.Time
}

// lossWarmup: an access's loss counts from this long after its first
// subflow appeared: slow start overshoots the path's queue, and its
// losses (tens of percent of a second's segments in the lab) are not the
// path's.
const lossWarmup = time.Second

func newAccMeter() *accMeter { return &accMeter{last: map[SubflowID][3]uint64{}} }

// add records a point from the access's established subflows; keep is how
// much history to hold.
func (m *accMeter) add(at time.Time, sfs []observe.Subflow, keep time.Duration) {
	seen := make(map[SubflowID]bool, len(sfs))
	p := meterPoint{at: at}
	if len(sfs) > 0 && m.joined.IsZero() {
		m.joined = at
	}
	for _, sf := range sfs {
		id := ID(sf)
		seen[id] = true
		cur := [3]uint64{sf.BytesAcked, sf.BytesSent, sf.BytesRetrans}
		prev := m.last[id]
		for i := range cur {
			if cur[i] >= prev[i] {
				m.cum[i] += cur[i] - prev[i]
			}
		}
		m.last[id] = cur
		if sf.SRTT > 0 && (p.srtt == 0 || sf.SRTT < p.srtt) {
			p.srtt = sf.SRTT
		}
		if waits(sf) {
			p.limited = true
		}
		if sf.MSS > 0 {
			m.mss = sf.MSS
		}
	}
	for id := range m.last {
		if !seen[id] {
			delete(m.last, id)
		}
	}
	p.acked, p.sent, p.retrans = m.cum[0], m.cum[1], m.cum[2]
	if n := len(m.points); n > 0 {
		p.carried = p.acked > m.points[n-1].acked
	}
	m.points = append(m.points, p)
	i := 0
	for i < len(m.points)-2 && at.Sub(m.points[i+1].at) >= keep {
		i++
	}
	if i > 0 {
		m.points = append(m.points[:0], m.points[i:]...)
	}
}

func (m *accMeter) latest() (meterPoint, bool) {
	if len(m.points) == 0 {
		return meterPoint{}, false
	}
	return m.points[len(m.points)-1], true
}

// since is the first point at or before now−window (the oldest kept when
// the history is shorter), and whether the history spans the window.
func (m *accMeter) since(now time.Time, window time.Duration) (meterPoint, bool) {
	if len(m.points) == 0 {
		return meterPoint{}, false
	}
	for i := len(m.points) - 1; i >= 0; i-- {
		if now.Sub(m.points[i].at) >= window {
			return m.points[i], true
		}
	}
	return m.points[0], false
}

// rate is the bytes acknowledged per second over the window; full says
// whether the history spans it.
func (m *accMeter) rate(now time.Time, window time.Duration) (bps float64, full bool) {
	last, ok := m.latest()
	if !ok {
		return 0, false
	}
	first, full := m.since(now, window)
	dt := last.at.Sub(first.at).Seconds()
	if dt <= 0 {
		return 0, false
	}
	return float64(last.acked-first.acked) / dt, full && dt > 0
}

// bytesSince is what was acknowledged since the point at or before
// now−window.
func (m *accMeter) bytesSince(now time.Time, window time.Duration) uint64 {
	last, ok := m.latest()
	if !ok {
		return 0
	}
	first, _ := m.since(now, window)
	return last.acked - first.acked
}

// minRTT is the smallest SRTT over the window (the latest point's when
// the window holds none).
func (m *accMeter) minRTT(now time.Time, window time.Duration) time.Duration {
	var best time.Duration
	for i := len(m.points) - 1; i >= 0; i-- {
		p := m.points[i]
		if i < len(m.points)-1 && now.Sub(p.at) > window {
			break
		}
		if p.srtt > 0 && (best == 0 || p.srtt < best) {
			best = p.srtt
		}
	}
	return best
}

// loss is the retransmitted share of the bytes sent over the window;
// known once minSegments were sent in it.
func (m *accMeter) loss(now time.Time, window time.Duration, minSegments int) (float64, bool) {
	last, ok := m.latest()
	if !ok || m.joined.IsZero() || now.Sub(m.joined) < lossWarmup {
		return 0, false
	}
	first, _ := m.since(now, min(window, now.Sub(m.joined)-lossWarmup))
	sent := last.sent - first.sent
	if sent == 0 || sent < uint64(minSegments)*uint64(max(m.mss, 1)) {
		return 0, false
	}
	return float64(last.retrans-first.retrans) / float64(sent), true
}

// limitedShare is the share of the points over the window in which the
// access had data waiting (waits), and how many points that is.
func (m *accMeter) limitedShare(now time.Time, window time.Duration) (float64, int) {
	n, lim := 0, 0
	for i := len(m.points) - 1; i >= 0 && now.Sub(m.points[i].at) < window; i-- {
		n++
		if m.points[i].limited {
			lim++
		}
	}
	if n == 0 {
		return 0, 0
	}
	return float64(lim) / float64(n), n
}

// waitingBytes: a subflow that holds this much unsent has data waiting
// beyond the burst MPTCP last handed it (64 KiB at most).
const waitingBytes = 64 << 10

// waits reports whether data waits to be sent on a subflow: its
// congestion window is full, or it holds more unsent than one of MPTCP's
// bursts (its window and pacing do not let out what MPTCP hands it). A
// subflow with room sends what it gets at once: in the lab, a 50 Mbit/s
// path sending 30 Mbit/s held 0–12 KB unsent in its samples, and
// 110–160 KB once the application sent 60 Mbit/s; its congestion window
// was full in under half of those samples (TCP's own pacing and small
// queues hold data back below the window too).
func waits(sf observe.Subflow) bool {
	return sf.Cwnd > 0 && sf.Unacked >= sf.Cwnd || sf.NotSent >= waitingBytes
}

// stalled reports whether a subflow is unavailable for now: a
// retransmission timeout fired and is pending (its backoff, or the loss
// state it puts the subflow in). A silent path shows so one RTO after its
// last ACK. "No ACK for a while with data outstanding" is no such sign:
// a subflow that was idle (backup) and is handed data again reports the
// time since its last ACK of long ago until the first new one arrives.
func stalled(sf observe.Subflow) (bool, string) {
	if sf.Backoff > 0 || sf.CAState == 4 {
		return true, fmt.Sprintf("retransmission timeout pending (backoff %d)", sf.Backoff)
	}
	return false, ""
}

// gate is an access's state under the rule's thresholds, per connection.
type gate struct {
	out        bool
	why        string
	since      time.Time
	above      int // points in a row over the RTT threshold
	nextProbe  time.Time
	probeUntil time.Time
	probes     int
	// The probes' own sent and retransmitted bytes since the access went
	// out, and the point each probe started at.
	probeSent, probeRetrans uint64
	probeFrom               meterPoint
	lastSeen                time.Time // the last point judged
}

func (g *gate) probing(now time.Time) bool { return g.out && now.Before(g.probeUntil) }

// step judges the access at a new point (newPoint) or between points, and
// says whether it is out of use now and why.
func (g *gate) step(now time.Time, th *ThresholdConfig, m *accMeter, newPoint bool) {
	p, ok := m.latest()
	if !ok {
		return
	}
	fresh := newPoint && p.at.After(g.lastSeen)
	if fresh {
		g.lastSeen = p.at
	}
	if !g.out {
		if !fresh {
			return
		}
		var why string
		if th.RTT > 0 && p.srtt > th.RTT {
			g.above++
			if g.above >= 2 {
				why = fmt.Sprintf("rtt %s > threshold %s", fmtMs(p.srtt), fmtMs(th.RTT))
			}
		} else {
			g.above = 0
		}
		if th.Loss > 0 && why == "" {
			if l, known := m.loss(now, th.LossWindow, th.MinSegments); known && l > float64(th.Loss) {
				why = fmt.Sprintf("loss %.2f%% > threshold %s over %s", l*100, th.Loss, th.LossWindow)
			}
		}
		if why != "" {
			g.out, g.why, g.since, g.above = true, why, now, 0
			g.nextProbe, g.probeUntil, g.probes = now.Add(th.ProbeInterval), time.Time{}, 0
			g.probeSent, g.probeRetrans = 0, 0
		}
		return
	}
	switch {
	case !g.probeUntil.IsZero() && now.Before(g.probeUntil):
		// On a probe: wait for its end.
	case !g.probeUntil.IsZero():
		// A probe ended: count its bytes and judge.
		g.probeSent += p.sent - g.probeFrom.sent
		g.probeRetrans += p.retrans - g.probeFrom.retrans
		g.probeUntil = time.Time{}
		back := true
		var still []string
		h := 1 - float64(th.Hysteresis)
		if th.RTT > 0 {
			lim := time.Duration(float64(th.RTT) * h)
			if p.srtt == 0 || p.srtt > lim {
				back = false
				still = append(still, fmt.Sprintf("rtt %s > %s (threshold less hysteresis)", fmtMs(p.srtt), fmtMs(lim)))
			}
		}
		if th.Loss > 0 {
			need := uint64(th.MinSegments) * uint64(max(m.mss, 1))
			switch {
			case g.probeSent < need:
				back = false
				still = append(still, fmt.Sprintf("loss not known yet (%d of %d B sent in probes)", g.probeSent, need))
			case float64(g.probeRetrans)/float64(g.probeSent) > float64(th.Loss)*h:
				back = false
				still = append(still, fmt.Sprintf("loss %.2f%% in probes > %.2f%%", 100*float64(g.probeRetrans)/float64(g.probeSent), float64(th.Loss)*h*100))
				// The loss is judged over the recent probes only.
				g.probeSent, g.probeRetrans = 0, 0
			}
		}
		if back {
			g.out, g.why = false, ""
			return
		}
		g.why = "still over: " + joinReasons(still)
		g.nextProbe = now.Add(th.ProbeInterval)
	case !now.Before(g.nextProbe):
		g.probes++
		g.probeFrom = p
		g.probeUntil = now.Add(probeLength(p.srtt))
	}
}

func joinReasons(s []string) string {
	out := ""
	for i, r := range s {
		if i > 0 {
			out += "; "
		}
		out += r
	}
	return out
}

// probeLength is how long a probe makes an access usable: two of its
// RTTs (the first ACKs of what it sends arrive after one; a subflow idle
// that long restarts from its initial window, so a probe carries a few
// tens of segments), at least 200 ms (two of the daemon's samples).
func probeLength(srtt time.Duration) time.Duration { return max(2*srtt, 200*time.Millisecond) }
