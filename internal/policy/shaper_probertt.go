package policy

import (
	"fmt"
	"time"

	"mpsteer/internal/observe"
)

// A far path under BBR rests through its ProbeRTT (ProbeRTTRest).
//
// Every 10 s that its min_rtt filter has not been refreshed, BBR holds a
// subflow's window at 4 segments for at least 200 ms and a round trip
// (ProbeRTT). MPTCP's scheduler keeps handing it data meanwhile (its
// pacing rate is unchanged), and what it hands a far path then trickles
// out at 4 segments a round trip while the receiver holds everything the
// main path sends after it: in ecf-50-10-1m each of the slow path's
// ProbeRTTs stopped the fast path for about 250 ms. So a far path that
// carries goes aside (its backup flag) one of its SRTTs before its filter
// expires: what it has in flight is still being acknowledged when the
// filter expires, BBR enters ProbeRTT with nothing left to send there,
// and the path comes back once ProbeRTT's 200 ms and a round trip have
// passed (BBR leaves ProbeRTT as the path restarts from idle), or once the
// filter was refreshed without one, or, when neither shows, after a second
// and a round trip.
type probeRTTRest struct {
	start time.Time // since when it rests (zero: it does not)
	probe time.Time // when it was first seen in ProbeRTT while resting
}

// probeRTTHold is how long BBR holds ProbeRTT once its window is down
// (bbr_probe_rtt_mode_ms).
const probeRTTHold = 200 * time.Millisecond

// restThroughProbeRTT starts and ends the rests of a connection's far
// paths.
func (p *shaper) restThroughProbeRTT(r *shapeRound) {
	for _, sf := range r.c.Subflows {
		s := r.st.subs[ID(sf)]
		in, known := sf.ProbeRTTIn()
		// (The main path is not far from itself: it never rests.)
		if !p.ProbeRTTRest || !known || !(s.state == shFree || s.state == shCapped) || !p.far(sf, r.main) {
			s.rest = probeRTTRest{}
			continue
		}
		probing := sf.BBR.Mode == observe.BBRProbeRTT
		if s.rest.start.IsZero() {
			if probing || in <= sf.SRTT {
				s.rest.start = r.now
			}
			continue
		}
		if probing && s.rest.probe.IsZero() {
			s.rest.probe = r.now
		}
		done := !s.rest.probe.IsZero() && r.now.Sub(s.rest.probe) >= probeRTTHold+sf.SRTT
		refreshed := !probing && sf.BBR.MinRTTAge < r.now.Sub(s.rest.start)
		if done || refreshed || r.now.Sub(s.rest.start) >= time.Second+sf.SRTT {
			s.rest = probeRTTRest{}
		}
	}
}

// resting says why a subflow rests ("": it does not).
func (s *shapeSub) resting(now time.Time) string {
	switch {
	case s.rest.start.IsZero():
		return ""
	case s.rest.probe.IsZero():
		return fmt.Sprintf("rests through BBR's ProbeRTT, due about now (aside %s)", fmtMs(now.Sub(s.rest.start)))
	}
	return fmt.Sprintf("rests through BBR's ProbeRTT (in it for %s)", fmtMs(now.Sub(s.rest.probe)))
}
