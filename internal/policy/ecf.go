package policy

import (
	"fmt"
	"math"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// ECF is eMPTCP's ECF-like traffic scheduler (paper: emptcp-full-
// extensibility, use case 3, after Lim et al.'s ECF): every round (the
// daemon's interval, 100 ms) it sets a rate vector over each connection's
// subflows. The subflow with the shortest RTT is the fast one and is never
// capped. A slow subflow (RTT above SlowFactor × the fast one's) may carry
// only what arrives in time: what it holds is out for its RTT, while the
// fast path keeps delivering behind it into the same receive window, so
//
//	(C_fast + r_slow) · RTT_slow ≤ Headroom · W
//
// with W the window the receiver advertises and C_fast the fast path's
// delivery rate. Its cap is r_slow = Headroom·W/RTT_slow − C_fast, at
// least MinRate (so that it stays measured); when what it could carry fits
// anyway, it is not capped. A slow path thus adds what it can without
// making the fast one wait at the receiver (head-of-line blocking), and
// nothing when the window is too small for both.
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
	best map[SubflowID]*peak
	caps map[SubflowID]units.Rate
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

// NewECF makes the policy with its defaults: slow means an RTT 1.25× the
// fast one's, 90% of the window, a 200 kbit/s floor, 3 s of memory.
func NewECF() *ECF {
	return &ECF{SlowFactor: 1.25, Headroom: 0.9, MinRate: 200 * units.Kbit, Memory: 3 * time.Second,
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
			st = &ecfConn{best: map[SubflowID]*peak{}, caps: map[SubflowID]units.Rate{}}
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
	rate := map[SubflowID]float64{} // bytes/s, best recent
	var wnd uint64
	var usable []int
	present := map[SubflowID]bool{}
	for i, sf := range c.Subflows {
		id := ID(sf)
		present[id] = true
		pk := st.best[id]
		if pk == nil {
			pk = &peak{}
			st.best[id] = pk
		}
		rate[id] = pk.add(now, float64(sf.DeliveryRate), p.Memory)
		wnd = max(wnd, uint64(sf.SndWnd))
		if sf.SRTT > 0 && !sf.Backup() {
			usable = append(usable, i)
		}
	}
	for id := range st.best {
		if !present[id] {
			delete(st.best, id)
			delete(st.caps, id)
		}
	}
	if p.Window > 0 {
		wnd = uint64(p.Window)
	}
	cs.WindowB = wnd
	if len(usable) < 2 {
		return nil, cs
	}
	sort.Slice(usable, func(i, j int) bool { return c.Subflows[usable[i]].SRTT < c.Subflows[usable[j]].SRTT })
	fast := c.Subflows[usable[0]]
	cs.Fast = ID(fast).String()
	var out []Action
	for _, i := range usable {
		sf := c.Subflows[i]
		id := ID(sf)
		ss := ECFSubflowStatus{Subflow: id.String(), RTTMs: float64(sf.SRTT) / 1e6, RateMbit: rate[id] * 8 / 1e6, Cap: "none"}
		if id == ID(fast) || float64(sf.SRTT) <= p.SlowFactor*float64(fast.SRTT) {
			cs.Subflows = append(cs.Subflows, ss)
			continue
		}
		budget := p.Headroom*float64(wnd)/sf.SRTT.Seconds() - rate[ID(fast)]
		want := units.Rate(0) // no cap
		reason := fmt.Sprintf("fits: %s of window allows %s here beside the fast path's %s (RTT %s vs %s)",
			units.Size(wnd), mbit(max(budget, 0)), mbit(rate[ID(fast)]), fmtMs(sf.SRTT), fmtMs(fast.SRTT))
		if budget < rate[id]*1.1 || rate[id] == 0 {
			want = units.Rate(math.Max(budget*8, float64(p.MinRate)))
			reason = fmt.Sprintf("in time only: (fast %s + this) × RTT %s must fit %.0f%% of the %s window",
				mbit(rate[ID(fast)]), fmtMs(sf.SRTT), p.Headroom*100, units.Size(wnd))
		}
		// Hysteresis: a cap moves only when it changes by a tenth.
		if old, ok := st.caps[id]; ok && want > 0 && old > 0 && math.Abs(float64(want-old)) < 0.1*float64(old) {
			want = old
		}
		st.caps[id] = want
		ss.Cap = RateText(want)
		cs.Subflows = append(cs.Subflows, ss)
		out = append(out, Action{Kind: Limit, Token: c.Token, Subflow: id, Rate: want, Reason: reason})
	}
	return out, cs
}

// Status reports the last rate vectors.
func (p *ECF) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}
