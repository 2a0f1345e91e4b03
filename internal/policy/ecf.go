package policy

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// ECF is eMPTCP's ECF-like traffic scheduler (paper: emptcp-full-
// extensibility, use case 3, after Lim et al.'s ECF and Ferlin et al.'s
// BLEST): every round (the daemon's interval, 100 ms) it sets a rate
// vector over each connection's subflows. The subflow with the shortest
// RTT is the fast one and is never capped. A slow subflow (base RTT above
// SlowFactor × the fast one's) may carry only what arrives in time: what
// it holds is out for its RTT while the fast path keeps delivering behind
// it into the same receive window, so
//
//	(C_fast + r_slow) · RTT_slow ≤ Headroom · W
//
// with W the window the receiver advertises, C_fast the fast path's rate
// and RTT_slow the slow path's base RTT (its minimum: the cap keeps its
// queue empty). Its cap is r_slow = Headroom·W/RTT_slow − C_fast, and at
// most 90% of what the slow path has shown it carries (so that its own
// queue, which would inflate its RTT and hold data back, stays empty). A
// subflow is capped only while the window allows it less than what it
// carries free. When less than MinRate would arrive in time, it is set
// aside (backup) instead: a cap that low would strand, behind its pacing,
// whatever the scheduler has already queued on it — measured in the lab,
// that held the whole connection back. A slow path thus adds what it can
// without making the fast one wait at the receiver (head-of-line
// blocking), and nothing when the window is too small for both.
//
// Rates are what each subflow had acknowledged per second over the last
// second; a subflow's capacity is the best of that over Memory while it was
// free (it is not measured while capped or set aside, so Memory is long).
type ECF struct {
	mu         sync.Mutex
	SlowFactor float64
	Headroom   float64
	MinRate    units.Rate
	// Window overrides the receive window the policy plans for (0: the
	// window the peer advertises, from the subflows).
	Window units.Size
	// Memory is how long the best delivery rate of a subflow is kept.
	Memory time.Duration
	conns  map[uint32]*ecfConn
	status []ECFConnStatus
}

type ecfConn struct {
	acked map[SubflowID]*rate // bytes acknowledged per second, over 1 s
	best  map[SubflowID]*peak // the best of that over Memory, while free
	seen  map[SubflowID]time.Time
	caps  map[SubflowID]units.Rate // 0: free; < 0: set aside (backup)
	wnd   peak                     // the receive window, its largest over 3 s
}

// peak keeps the largest value seen over a window of time.
type peak struct {
	at []time.Time
	v  []float64
}

func (p *peak) add(now time.Time, v float64, window time.Duration) float64 {
	// Monotonic deque: the front is the window's maximum.
	for len(p.v) > 0 && p.v[len(p.v)-1] <= v {
		p.v, p.at = p.v[:len(p.v)-1], p.at[:len(p.at)-1]
	}
	p.v, p.at = append(p.v, v), append(p.at, now)
	for len(p.at) > 1 && now.Sub(p.at[0]) > window {
		p.v, p.at = p.v[1:], p.at[1:]
	}
	return p.v[0]
}

// ECFConnStatus is one connection's rate vector.
type ECFConnStatus struct {
	Token    string             `json:"token"`
	Fast     string             `json:"fast_subflow,omitempty"`
	WindowB  uint64             `json:"window_bytes"`
	Subflows []ECFSubflowStatus `json:"subflows"`
}

// ECFSubflowStatus is one subflow's numbers and cap.
type ECFSubflowStatus struct {
	Subflow  string  `json:"subflow"`
	RTTMs    float64 `json:"rtt_ms"`
	RateMbit float64 `json:"delivery_mbit"`
	Cap      string  `json:"cap"`
}

func init() {
	Register("ecf", func(m *yamlcfg.Map, env Env) Policy {
		p := NewECF()
		p.SlowFactor = m.Float("slow_factor", p.SlowFactor, 1, 100)
		p.Headroom = float64(m.Fraction("headroom", units.Fraction(p.Headroom)))
		if p.Headroom <= 0 && !m.Failed("headroom") {
			m.Errorf("headroom", "must be above 0%%")
		}
		p.MinRate = m.Rate("min_rate", p.MinRate)
		if p.MinRate <= 0 && !m.Failed("min_rate") {
			m.Errorf("min_rate", "must be above 0bit: a slow subflow must keep being measured")
		}
		p.Window = m.Size("window", p.Window)
		p.Memory = m.Duration("memory", p.Memory)
		if p.Memory <= 0 && !m.Failed("memory") {
			m.Errorf("memory", "must be above 0s")
		}
		return p
	})
}

// NewECF makes the policy with its defaults: slow means a base RTT 1.25×
// the fast one's, 90% of the window, a 200 kbit/s floor, 30 s of memory.
func NewECF() *ECF {
	return &ECF{SlowFactor: 1.25, Headroom: 0.9, MinRate: 200 * units.Kbit, Memory: 30 * time.Second,
		conns: map[uint32]*ecfConn{}}
}

// Name is "ecf".
func (p *ECF) Name() string { return "ecf" }

// Requirements: rates are capped.
func (p *ECF) Requirements() Requirements { return Requirements{Limits: true} }

// Decide sets each connection's rate vector.
func (p *ECF) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Action
	var status []ECFConnStatus
	live := map[uint32]bool{}
	for _, c := range s.Conns {
		live[c.Token] = true
		st := p.conns[c.Token]
		if st == nil {
			st = &ecfConn{acked: map[SubflowID]*rate{}, best: map[SubflowID]*peak{}, seen: map[SubflowID]time.Time{}, caps: map[SubflowID]units.Rate{}}
			p.conns[c.Token] = st
		}
		acts, cs := p.decideConn(s.Now, c, st)
		out = append(out, acts...)
		status = append(status, cs)
	}
	for tok := range p.conns {
		if !live[tok] {
			delete(p.conns, tok)
		}
	}
	p.status = status
	return out
}

func (p *ECF) decideConn(now time.Time, c *Conn, st *ecfConn) ([]Action, ECFConnStatus) {
	cs := ECFConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
	cur := map[SubflowID]float64{}  // bytes/s over the last second
	best := map[SubflowID]float64{} // best while free (not capped, not set aside)
	var wnd uint64
	var usable []int
	present := map[SubflowID]bool{}
	for i, sf := range c.Subflows {
		id := ID(sf)
		present[id] = true
		if st.acked[id] == nil {
			st.acked[id], st.best[id], st.seen[id] = &rate{}, &peak{}, now
		}
		cur[id] = max(st.acked[id].add(now, sf.BytesAcked, time.Second), 0)
		if st.caps[id] == 0 && now.Sub(st.seen[id]) >= time.Second {
			best[id] = st.best[id].add(now, cur[id], p.Memory)
		} else if len(st.best[id].v) > 0 {
			best[id] = st.best[id].v[0]
		}
		wnd = max(wnd, uint64(sf.SndWnd))
		if baseRTT(sf) > 0 {
			usable = append(usable, i)
		}
	}
	for id := range st.acked {
		if !present[id] {
			delete(st.acked, id)
			delete(st.best, id)
			delete(st.seen, id)
			delete(st.caps, id)
		}
	}
	// The advertised window moves with every ACK; its largest over the
	// last seconds is what the receiver can take.
	wnd = uint64(st.wnd.add(now, float64(wnd), 3*time.Second))
	if p.Window > 0 {
		wnd = uint64(p.Window)
	}
	cs.WindowB = wnd
	if len(usable) < 2 {
		return nil, cs
	}
	sort.Slice(usable, func(i, j int) bool { return baseRTT(c.Subflows[usable[i]]) < baseRTT(c.Subflows[usable[j]]) })
	fast := c.Subflows[usable[0]]
	cf := math.Max(best[ID(fast)], cur[ID(fast)])
	cs.Fast = ID(fast).String()
	var out []Action
	decide := func(id SubflowID, backup bool, r units.Rate, why string) {
		out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: id, Backup: backup, Reason: why},
			Action{Kind: Limit, Token: c.Token, Subflow: id, Rate: r, Reason: why})
	}
	for _, i := range usable {
		sf := c.Subflows[i]
		id := ID(sf)
		rtt := baseRTT(sf)
		ss := ECFSubflowStatus{Subflow: id.String(), RTTMs: float64(rtt) / 1e6, RateMbit: cur[id] * 8 / 1e6, Cap: "none"}
		if id == ID(fast) || float64(rtt) <= p.SlowFactor*float64(baseRTT(fast)) {
			decide(id, false, 0, "the fast path (or as fast): never held back")
			cs.Subflows = append(cs.Subflows, ss)
			continue
		}
		inTime := p.Headroom*float64(wnd)/rtt.Seconds() - cf // bytes/s
		capRate := units.Rate(0)
		var why string
		// Hysteresis: set aside below MinRate, back only above 4×MinRate.
		aside := inTime*8 < float64(p.MinRate) || st.caps[id] < 0 && inTime*8 < 4*float64(p.MinRate)
		switch {
		case aside:
			// Nothing it could carry arrives in time: no new data at all
			// (a cap this low would strand what the scheduler queues on it).
			capRate = -1
			why = fmt.Sprintf("set aside: the fast path's %s fills %.0f%% of the %s window over this path's base RTT %s",
				mbit(cf), p.Headroom*100, units.Size(wnd), fmtMs(rtt))
		case best[id] > 0 && inTime < 0.9*best[id]:
			capRate = roundRate(units.Rate(inTime * 8))
			why = fmt.Sprintf("in time: (fast %s + this) × base RTT %s within %.0f%% of the %s window",
				mbit(cf), fmtMs(rtt), p.Headroom*100, units.Size(wnd))
		default:
			why = fmt.Sprintf("free: the window allows %s here, more than the %s it carries", mbit(inTime), mbit(best[id]))
		}
		// Hysteresis: a cap moves only when it changes by a tenth.
		if old := st.caps[id]; old > 0 && capRate > 0 && math.Abs(float64(capRate-old)) < 0.1*float64(old) {
			capRate = old
		}
		st.caps[id] = capRate
		switch {
		case capRate < 0:
			ss.Cap = "set aside (backup)"
			decide(id, true, 0, why)
		default:
			ss.Cap = RateText(capRate)
			decide(id, false, capRate, why)
		}
		cs.Subflows = append(cs.Subflows, ss)
	}
	return out, cs
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

// Status reports the last rate vectors.
func (p *ECF) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}
