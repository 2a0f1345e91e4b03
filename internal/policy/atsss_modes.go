package policy

import (
	"fmt"
	"math"
	"strings"
	"sync"
	"time"

	"mpsteer/internal/units"
)

// The steering modes of the atsss section, each over the connections of
// one rule (atsss.go hands each its connections and what each access of
// them is: available, usable, probed).

func newSteering(env Env, accesses []Access, r *ATSSSRule) steering {
	switch r.Mode {
	case ModeActiveStandby:
		return newActiveStandby(env, accesses, r)
	case ModeSmallestDelay:
		return &smallestDelay{r: r, accesses: accesses, conns: map[uint32]*sdConn{}}
	case ModeLoadBalancing:
		return &loadBalancing{r: r, accesses: accesses, conns: map[uint32]*lbConn{}}
	case ModePriority:
		return &priorityBased{r: r, accesses: accesses, conns: map[uint32]*prioConn{}}
	}
	panic("atsss: no steering for mode " + r.Mode) // ParseATSSS refuses every other mode
}

// ---- Active-Standby ----

// activeStandby is prefer with the active access preferred, judged on
// availability alone (no RTT rule): failover and return are prefer's,
// with its probes under the userspace path manager. While the active
// access is out of use by a threshold, a second prefer with the standby
// preferred takes the connection, until the active is back under it.
type activeStandby struct {
	r        *ATSSSRule
	accesses []Access
	act, sb  *Prefer
	mu       sync.Mutex
	onSB     map[uint32]bool
}

func newActiveStandby(env Env, accesses []Access, r *ATSSSRule) *activeStandby {
	mk := func(i int) *Prefer {
		p := NewPrefer(env)
		if i >= 0 {
			p.Paths = append(targets(nil), accesses[i].Targets...)
			p.targets = append([]string(nil), p.Paths...)
		}
		p.availabilityOnly = true
		// The operator's modes steer by their own rules; the hold of the
		// other paths during an outage (prefer_hold.go) is prefer's.
		p.HoldOthers = false
		if p.mesh != nil {
			for _, a := range accesses {
				p.mesh.filter.Allow = append(p.mesh.filter.Allow, a.Targets...)
			}
		}
		return p
	}
	return &activeStandby{r: r, accesses: accesses, act: mk(r.active), sb: mk(r.standby), onSB: map[uint32]bool{}}
}

func (m *activeStandby) decide(s *Snapshot, views []*connView) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	subA := &Snapshot{Now: s.Now, Sampled: s.Sampled}
	subB := &Snapshot{Now: s.Now, Sampled: s.Sampled}
	byTok := map[uint32]*connView{}
	for _, v := range views {
		byTok[v.c.Token] = v
		a := v.acc[m.r.active]
		// The standby takes over while the active access is out by a
		// threshold; prefer itself handles an active access that stalls.
		sb := m.r.standby >= 0 && a.available && !a.usable
		m.onSB[v.c.Token] = sb
		if sb {
			subB.Conns = append(subB.Conns, v.c)
			v.st.summary = fmt.Sprintf("standby %s carries: active %s is %s", m.accesses[m.r.standby].Name, m.accesses[m.r.active].Name, a.why)
		} else {
			subA.Conns = append(subA.Conns, v.c)
		}
	}
	for _, o := range s.Outcomes {
		o.Action.Policy = m.act.Name()
		if m.onSB[o.Action.Token] {
			subB.Outcomes = append(subB.Outcomes, o)
		} else {
			subA.Outcomes = append(subA.Outcomes, o)
		}
	}
	out := m.act.Decide(subA)
	out = append(out, m.sb.Decide(subB)...)
	// What each access does, from prefer's decisions.
	carries := map[uint32]map[int]bool{}
	for _, a := range out {
		v := byTok[a.Token]
		if v == nil || a.Kind != Backup {
			continue
		}
		for i := range v.acc {
			for _, sf := range v.acc[i].subflows {
				if ID(sf) != a.Subflow {
					continue
				}
				role := "standby"
				switch i {
				case m.r.active:
					role = "active"
				case m.r.standby:
				default:
					role = "neither active nor standby"
				}
				if a.Backup {
					v.st.doing[i] = role + ", backup: " + a.Reason
				} else {
					v.st.doing[i] = role + ", carries: " + a.Reason
					if carries[a.Token] == nil {
						carries[a.Token] = map[int]bool{}
					}
					carries[a.Token][i] = true
				}
			}
		}
	}
	for _, v := range views {
		if v.st.summary != "" {
			continue
		}
		act := m.accesses[m.r.active].Name
		switch c := carries[v.c.Token]; {
		case c[m.r.active] && len(c) == 1:
			v.st.summary = "active " + act + " carries"
		case c[m.r.active]:
			v.st.summary = "active " + act + " carries, with the others (prefer: no subflow on it is viable)"
		case m.r.standby >= 0 && c[m.r.standby]:
			v.st.summary = fmt.Sprintf("standby %s carries: active %s is unavailable", m.accesses[m.r.standby].Name, act)
		}
	}
	return out
}

func (m *activeStandby) forget(tok uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.onSB, tok)
}

func (m *activeStandby) opensSubflows() bool { return m.act.mesh != nil }

func (m *activeStandby) requirements() Requirements {
	r := m.act.Requirements()
	q := m.sb.Requirements()
	for a, d := range q.RTOMax {
		if _, ok := r.RTOMax[a]; !ok {
			r.RTOMax[a] = d
		}
	}
	for a, d := range q.SynRTO {
		if _, ok := r.SynRTO[a]; !ok {
			r.SynRTO[a] = d
		}
	}
	return r
}

func (m *activeStandby) status() any {
	return map[string]any{"active": m.act.Status(), "standby_while_active_over_threshold": m.sb.Status()}
}

// ---- Smallest Delay ----

// smallestDelay: the usable access with the smallest RTT carries the
// traffic, the others are backup. An access's RTT is the smallest SRTT
// its subflows reported over rtt_window: the traffic's own queue spikes
// do not count, a real rise shows within the window. The traffic moves
// only to an access whose RTT is smaller by margin (and by min_margin):
// two accesses within the margin do not flap. An access that does not
// carry is probed every probe_interval (usable for 2 of its RTTs, at
// least 200 ms: MPTCP's scheduler gives an idle subflow data first), so
// that its RTT is not one from long ago.
type smallestDelay struct {
	r        *ATSSSRule
	accesses []Access
	mu       sync.Mutex
	conns    map[uint32]*sdConn
}

type sdConn struct {
	sel      int
	since    time.Time
	switches int
	next     []time.Time // per access: its next probe
	until    []time.Time // per access: the end of its probe under way
}

func (m *smallestDelay) decide(s *Snapshot, views []*connView) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.r.SmallestDelay
	var out []Action
	for _, v := range views {
		st := m.conns[v.c.Token]
		if st == nil {
			st = &sdConn{sel: -1, next: make([]time.Time, len(v.acc)), until: make([]time.Time, len(v.acc))}
			m.conns[v.c.Token] = st
		}
		rtt := make([]time.Duration, len(v.acc))
		best := -1
		for i, a := range v.acc {
			if !a.usable {
				continue
			}
			rtt[i] = a.meter.minRTT(s.Now, c.RTTWindow)
			if rtt[i] > 0 && (best < 0 || rtt[i] < rtt[best]) {
				best = i
			}
		}
		switch {
		case best < 0:
			// No usable access with a known RTT: MPTCP's default.
			v.st.summary = "no usable access with a measured RTT"
			continue
		case st.sel < 0 || !v.acc[st.sel].usable || rtt[st.sel] == 0:
			st.sel, st.since = best, s.Now
		case best != st.sel:
			cur, alt := rtt[st.sel], rtt[best]
			if float64(alt)*(1+float64(c.Margin)) < float64(cur) && cur-alt >= c.MinMargin {
				st.sel, st.since = best, s.Now
				st.switches++
			}
		}
		var others []string
		for i, a := range v.acc {
			if i != st.sel && a.usable && rtt[i] > 0 {
				others = append(others, fmt.Sprintf("%s %s", m.accesses[i].Name, fmtMs(rtt[i])))
			}
		}
		sel := m.accesses[st.sel].Name
		v.st.summary = fmt.Sprintf("%s carries: rtt %s, the smallest (others %s; a move needs %s less and %s)", sel, fmtMs(rtt[st.sel]),
			orNone(strings.Join(others, ", ")), c.Margin, fmtMs(c.MinMargin))
		for i, a := range v.acc {
			if !a.usable {
				continue
			}
			backup, why := true, ""
			switch {
			case i == st.sel:
				backup, why = false, fmt.Sprintf("smallest delay: rtt %s", fmtMs(rtt[i]))
			case rtt[i] == 0:
				backup, why = false, "rtt not measured yet: usable until it is"
			case s.Now.Before(st.until[i]):
				backup, why = false, fmt.Sprintf("probe: its rtt (%s, over %s) is measured again", fmtMs(rtt[i]), c.RTTWindow)
			case !s.Now.Before(st.next[i]) && !st.next[i].IsZero():
				st.until[i] = s.Now.Add(probeLength(rtt[i]))
				st.next[i] = s.Now.Add(c.ProbeInterval)
				backup, why = false, fmt.Sprintf("probe: its rtt (%s) is measured again", fmtMs(rtt[i]))
			default:
				if st.next[i].IsZero() {
					st.next[i] = s.Now.Add(c.ProbeInterval)
				}
				why = fmt.Sprintf("rtt %s is not %s below %s's %s", fmtMs(rtt[i]), c.Margin, sel, fmtMs(rtt[st.sel]))
			}
			if i == st.sel {
				st.next[i], st.until[i] = time.Time{}, time.Time{}
			}
			v.st.doing[i] = map[bool]string{false: "carries: ", true: "backup: "}[backup] + why
			for _, sf := range a.subflows {
				out = append(out, Action{Kind: Backup, Token: v.c.Token, Subflow: ID(sf), Backup: backup, Reason: v.st.doing[i]})
			}
		}
	}
	return out
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func (m *smallestDelay) forget(tok uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, tok)
}

func (m *smallestDelay) opensSubflows() bool        { return false }
func (m *smallestDelay) requirements() Requirements { return Requirements{} }

func (m *smallestDelay) status() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]any{}
	for tok, st := range m.conns {
		if st.sel >= 0 {
			out[fmt.Sprintf("%08x", tok)] = map[string]any{"carrying": m.accesses[st.sel].Name, "since": st.since, "switches": st.switches}
		}
	}
	return out
}

// ---- Load-Balancing ----

// loadBalancing holds each access to its share of the connection's bytes
// with rate caps. The binding access is the one that can carry least
// compared with its share: it runs uncapped, and every other access j is
// capped at s_j / s_b × its rate (s: the shares among the usable
// accesses), corrected by how far j's share of the bytes over the window
// is from its target. A capped access that cannot fill its cap (it
// delivers under 85% of it for a rate window) becomes the binding one.
// When an access cannot carry its share, the split is held anyway: the
// connection gets the binding access's rate over its share, and the
// others carry no more than their shares of that. An access that is not
// usable (no subflow, stalled, over a threshold) leaves its share to the
// others in proportion; one that is alone carries everything.
type loadBalancing struct {
	r        *ATSSSRule
	accesses []Access
	mu       sync.Mutex
	conns    map[uint32]*lbConn
}

type lbConn struct {
	usable  string // the usable accesses when last judged: a change starts over
	from    time.Time
	binding int
	caps    []float64   // bytes/s per access (0: none)
	capped  []time.Time // since when each is capped
	hist    [][]capAt   // per access: its caps over the last rate window
	corr    []float64   // per access: the correction its cap carries
	peak    peak        // the binding access's rate, its best recently
	peakOf  int         // the access the peak is of
	step    time.Time   // the point the corrections last moved at
}

// Controller constants: a capped access is short when it delivers under
// lbShort of its cap; a cap carries a correction that moves, once per
// sample, by lbGain × the relative error of the access's share (an
// integral: it stops moving only where the share is right), within
// [lbMinCorr, lbMaxCorr]; no cap is set below lbFloor bytes/s (100
// kbit/s: a cap far below a path's rate delays the 64 KiB bursts MPTCP
// hands a subflow).
const (
	lbShort      = 0.85
	lbGain       = 0.05
	lbWindowGain = 0.5
	lbMinCorr    = 0.7
	lbMaxCorr    = 1.5
	lbFloor      = 12500.0
	// lbStep: a cap within this much of the one in force is not changed
	// (fewer actions, the same split).
	lbStep = 0.01
)

func (m *loadBalancing) decide(s *Snapshot, views []*connView) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.r.LoadBalancing
	var out []Action
	for _, v := range views {
		decideAll := func(backup bool, why func(i int) string) {
			for i, a := range v.acc {
				if !a.usable {
					continue
				}
				v.st.doing[i] = why(i)
				for _, sf := range a.subflows {
					out = append(out, Action{Kind: Backup, Token: v.c.Token, Subflow: ID(sf), Backup: backup, Reason: v.st.doing[i]})
				}
			}
		}
		if m.r.split == nil {
			v.st.summary = "autonomous: every usable access carries what MPTCP's scheduler gives it (no caps)"
			decideAll(false, func(int) string { return "carries: autonomous split (MPTCP's own aggregation)" })
			continue
		}
		// The accesses with a share, among the usable ones.
		var in []int
		var sum float64
		var key strings.Builder
		for i, a := range v.acc {
			if a.usable && m.r.split[i] > 0 {
				in = append(in, i)
				sum += m.r.split[i]
				fmt.Fprintf(&key, "%d,", i)
			}
		}
		for i, a := range v.acc {
			if a.usable && m.r.split[i] == 0 {
				v.st.doing[i] = "backup: its share is 0%"
				for _, sf := range a.subflows {
					out = append(out, Action{Kind: Backup, Token: v.c.Token, Subflow: ID(sf), Backup: true, Reason: v.st.doing[i]})
				}
			}
		}
		st := m.conns[v.c.Token]
		if st == nil || st.usable != key.String() {
			st = &lbConn{usable: key.String(), from: s.Now, binding: -1, peakOf: -1, caps: make([]float64, len(v.acc)), capped: make([]time.Time, len(v.acc)), hist: make([][]capAt, len(v.acc)), corr: make([]float64, len(v.acc))}
			for i := range st.corr {
				st.corr[i] = 1
			}
			m.conns[v.c.Token] = st
		}
		if len(in) == 0 {
			v.st.summary = "no usable access has a share"
			continue
		}
		carry := func(i int, why string) {
			v.st.doing[i] = "carries: " + why
			for _, sf := range v.acc[i].subflows {
				out = append(out, Action{Kind: Backup, Token: v.c.Token, Subflow: ID(sf), Backup: false, Reason: v.st.doing[i]})
			}
		}
		if len(in) == 1 {
			v.st.summary = fmt.Sprintf("%s is the only usable access with a share: it carries everything", m.accesses[in[0]].Name)
			carry(in[0], "the only usable access with a share")
			continue
		}
		share := func(i int) float64 { return m.r.split[i] / sum }
		rate := make([]float64, len(v.acc))
		full := true
		for _, i := range in {
			var f bool
			rate[i], f = v.acc[i].meter.rate(s.Now, c.RateWindow)
			full = full && (f || s.Now.Sub(st.from) >= c.RateWindow/2)
		}
		// Caps from half a rate window on: the first second uncapped
		// would put its split off by what a second carries.
		full = full && s.Now.Sub(st.from) >= c.RateWindow/2
		if !full {
			v.st.summary = fmt.Sprintf("measuring each access's rate (over %s) before capping", c.RateWindow)
			for _, i := range in {
				carry(i, "uncapped while its rate is measured")
			}
			continue
		}
		// Each access's share of the bytes over the window (since the
		// usable accesses last changed).
		win := min(c.Window, s.Now.Sub(st.from))
		got := make([]float64, len(v.acc))
		var total float64
		for _, i := range in {
			got[i] = float64(v.acc[i].meter.bytesSince(s.Now, win))
			total += got[i]
		}
		if st.binding < 0 || !contains(in, st.binding) {
			st.binding = -1
			for _, i := range in {
				if st.binding < 0 || rate[i]/share(i) < rate[st.binding]/share(st.binding) {
					st.binding = i
				}
			}
		} else {
			// A capped access that cannot fill its cap (the lowest it had
			// over the rate window) is the binding one now, if it carries
			// less than the binding one for its share.
			b := st.binding
			for _, i := range in {
				if i == b || st.caps[i] == 0 || s.Now.Sub(st.capped[i]) < c.RateWindow || rate[i] >= lbShort*lowestCap(st.hist[i], s.Now, c.RateWindow) {
					continue
				}
				if rate[i]/share(i) < rate[b]/share(b) {
					b = i
				}
			}
			st.binding = b
		}
		b := st.binding
		if b != st.peakOf {
			st.peak, st.peakOf = peak{}, b
		}
		// The binding access's rate: its best over two rate windows. Caps
		// that follow its rate down feed on themselves: data MPTCP handed
		// a capped subflow waits there, the receiver waits for it, the
		// binding access slows, and the caps tighten.
		R := st.peak.add(s.Now, rate[b], 2*c.RateWindow) / share(b)
		var rateSum float64
		for _, i := range in {
			rateSum += rate[i]
		}
		pt, _ := v.acc[b].meter.latest()
		step := pt.at.After(st.step)
		if step {
			st.step = pt.at
		}
		var parts []string
		for _, i := range in {
			sh := 0.0
			if total > 0 {
				sh = got[i] / total
			}
			parts = append(parts, fmt.Sprintf("%s %.1f%% (target %.1f%%)", m.accesses[i].Name, sh*100, share(i)*100))
			if i == b {
				st.caps[i], st.capped[i], st.hist[i] = 0, time.Time{}, st.hist[i][:0]
				carry(i, fmt.Sprintf("binding access: uncapped at %s, %.1f%% of the bytes over %s (target %.1f%%); the others are held to the split against it",
					mbit(rate[i]), sh*100, fmtDur(win), share(i)*100))
				continue
			}
			// The integral: on the shares of the rates (over the rate
			// window), so that it settles where they are right (a demand
			// below what the accesses carry is spread by MPTCP's scheduler,
			// not by the caps alone). The proportional part: on the shares
			// of the bytes over the window, so that what went wrong a few
			// seconds ago (the first second, uncapped) is made up for.
			if step && rateSum > 0 {
				e := (share(i) - rate[i]/rateSum) / share(i)
				st.corr[i] = math.Min(lbMaxCorr, math.Max(lbMinCorr, st.corr[i]*(1+lbGain*e)))
			}
			prop := 1.0
			if total > 0 && win >= c.RateWindow {
				prop = 1 + lbWindowGain*(share(i)-sh)/share(i)
			}
			capB := math.Max(lbFloor, share(i)*R*math.Min(lbMaxCorr, math.Max(lbMinCorr, st.corr[i]*prop)))
			switch {
			case st.caps[i] == 0:
				st.capped[i] = s.Now
				st.caps[i] = capB
			case math.Abs(capB-st.caps[i]) > st.caps[i]*lbStep:
				st.caps[i] = capB
			default:
				capB = st.caps[i] // within lbStep of the cap in force: kept
			}
			st.hist[i] = append(st.hist[i], capAt{s.Now, capB})
			for len(st.hist[i]) > 2 && s.Now.Sub(st.hist[i][1].at) >= c.RateWindow {
				st.hist[i] = st.hist[i][1:]
			}
			carry(i, fmt.Sprintf("capped at %s to hold %.1f%%: carries %s, %.1f%% of the bytes over %s", mbit(capB), share(i)*100, mbit(rate[i]), sh*100, fmtDur(win)))
			n := len(v.acc[i].subflows)
			for _, sf := range v.acc[i].subflows {
				out = append(out, Action{Kind: Limit, Token: v.c.Token, Subflow: ID(sf), Rate: units.Rate(capB * 8 / float64(n)), Reason: v.st.doing[i]})
			}
		}
		v.st.summary = fmt.Sprintf("split %s; binding %s (%s); the connection can carry %s at this split", strings.Join(parts, ", "),
			m.accesses[b].Name, mbit(rate[b]), mbit(R))
	}
	return out
}

type capAt struct {
	at  time.Time
	cap float64
}

// lowestCap is the lowest cap an access had over the window (0: it was
// uncapped some of the time).
func lowestCap(h []capAt, now time.Time, window time.Duration) float64 {
	low := math.Inf(1)
	for i := len(h) - 1; i >= 0; i-- {
		low = math.Min(low, h[i].cap)
		if now.Sub(h[i].at) >= window {
			break
		}
	}
	if math.IsInf(low, 1) {
		return 0
	}
	return low
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

func fmtDur(d time.Duration) string { return d.Round(100 * time.Millisecond).String() }

func (m *loadBalancing) forget(tok uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, tok)
}

func (m *loadBalancing) opensSubflows() bool { return false }

// capNotSentLowat bounds the unsent data MPTCP queues on each subflow
// where caps are set: the scheduler hands a subflow 64 KiB bursts, and
// what waits behind a cap the receiver waits for (and the capped access
// carries it beyond its share).
const capNotSentLowat = 128 << 10

func (m *loadBalancing) requirements() Requirements {
	if m.r.split == nil {
		return Requirements{}
	}
	return Requirements{Limits: true, NotSentLowat: capNotSentLowat}
}

func (m *loadBalancing) status() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[string]any{}
	for tok, st := range m.conns {
		caps := map[string]string{}
		for i, c := range st.caps {
			if c > 0 {
				caps[m.accesses[i].Name] = mbit(c)
			}
		}
		b := ""
		if st.binding >= 0 {
			b = m.accesses[st.binding].Name
		}
		out[fmt.Sprintf("%08x", tok)] = map[string]any{"binding": b, "caps": caps}
	}
	return out
}

// ---- Priority-based ----

// priorityBased: the high-priority access carries everything; a lower
// one carries only the overflow. An access is congested when data waited
// to be sent on it (waits: its congestion window full, or more than one
// of MPTCP's bursts unsent) in limited_share of the samples over window;
// it has room otherwise. The next access is backup while every access before it
// has room; when they are all congested it carries, capped (from a tenth
// of their rate): the cap grows by a tenth per sample while they stay
// congested and shrinks by a tenth while they have room, down to
// prioFloor, and the access is backup again once they had room for a
// whole window at that floor; so that it settles where the accesses
// before it are just full, carrying what they cannot. An access that
// does not fill its cap while those before it are congested carries the
// whole overflow already: its cap is held a quarter above what it
// carries. One that has data waiting itself below its cap carries all it
// can (the application sends more than every access holds): uncapped,
// until it or those before it have room again.
type priorityBased struct {
	r        *ATSSSRule
	accesses []Access
	mu       sync.Mutex
	conns    map[uint32]*prioConn
}

const (
	prioOff = iota
	prioOverflow
	prioFree
)

type prioConn struct {
	first time.Time // when the connection was first seen
	state []int
	cap   []float64 // bytes/s
	since []time.Time
	full  []time.Time // when the accesses before each were last all congested
	step  time.Time   // the point the caps last moved at
}

// prioFloor is the lowest cap of an access that takes an overflow (1
// Mbit/s, and at least a twentieth of what the accesses before it carry):
// MPTCP hands a subflow 64 KiB at a time, and what waits behind a low cap
// holds the receiver up. prioWarmup: a connection's first second is its
// slow start, where every subflow is cwnd-limited by nature.
const (
	prioFloor  = 125000.0
	prioWarmup = time.Second
)

func (m *priorityBased) decide(s *Snapshot, views []*connView) []Action {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := m.r.Priority
	var out []Action
	for _, v := range views {
		st := m.conns[v.c.Token]
		if st == nil {
			st = &prioConn{first: s.Now, state: make([]int, len(v.acc)), cap: make([]float64, len(v.acc)), since: make([]time.Time, len(v.acc)), full: make([]time.Time, len(v.acc))}
			m.conns[v.c.Token] = st
		}
		decide := func(i int, backup bool, capB float64, why string) {
			verb := "carries: "
			if backup {
				verb = "backup: "
			}
			v.st.doing[i] = verb + why
			for _, sf := range v.acc[i].subflows {
				out = append(out, Action{Kind: Backup, Token: v.c.Token, Subflow: ID(sf), Backup: backup, Reason: v.st.doing[i]})
				if capB > 0 {
					out = append(out, Action{Kind: Limit, Token: v.c.Token, Subflow: ID(sf), Rate: units.Rate(capB * 8 / float64(len(v.acc[i].subflows))), Reason: v.st.doing[i]})
				}
			}
		}
		var order []int
		for _, i := range m.r.order {
			if v.acc[i].usable {
				order = append(order, i)
			}
		}
		for i, a := range v.acc {
			if a.usable && !contains(m.r.order, i) {
				decide(i, true, 0, "not in the priority list")
			}
		}
		if len(order) == 0 {
			v.st.summary = "no usable access in the priority list"
			continue
		}
		// Move the caps once per sample of the kernel's figures.
		pt, _ := v.acc[order[0]].meter.latest()
		step := pt.at.After(st.step)
		if step {
			st.step = pt.at
		}
		congested := func(i int) (bool, string) {
			sh, n := v.acc[i].meter.limitedShare(s.Now, c.Window)
			return n >= 2 && sh >= float64(c.LimitedShare), fmt.Sprintf("data waiting in %.0f%% of the samples over %s", sh*100, c.Window)
		}
		hi := order[0]
		st.state[hi] = prioFree
		_, hiWhy := congested(hi)
		decide(hi, false, 0, fmt.Sprintf("highest-priority usable access: carries everything it can (%s)", hiWhy))
		v.st.summary = fmt.Sprintf("%s carries (%s)", m.accesses[hi].Name, hiWhy)
		full, upRate := true, 0.0
		var upWhy []string
		for k, i := range order {
			if k == 0 {
				c0, w := congested(i)
				full = c0
				upWhy = append(upWhy, m.accesses[i].Name+" "+w)
				r, _ := v.acc[i].meter.rate(s.Now, c.Window)
				upRate += r
				continue
			}
			rate, _ := v.acc[i].meter.rate(s.Now, c.Window)
			floor := math.Max(prioFloor, upRate/20)
			up := strings.Join(upWhy, ", ")
			if full {
				st.full[i] = s.Now
			}
			switch st.state[i] {
			case prioOff:
				if full && s.Now.Sub(st.first) >= prioWarmup {
					st.state[i], st.cap[i], st.since[i] = prioOverflow, math.Max(upRate/10, floor), s.Now
				}
			case prioOverflow:
				own, _ := congested(i)
				switch {
				case full && own && s.Now.Sub(st.since[i]) >= c.Window && rate < 0.8*st.cap[i]:
					// Full itself below its cap: it carries all it can.
					st.state[i], st.cap[i], st.since[i] = prioFree, 0, s.Now
				case full && step && rate < 0.8*st.cap[i] && s.Now.Sub(st.since[i]) >= c.Window:
					// It has room and does not fill its cap: the overflow is
					// what it carries; the cap stays a quarter above it.
					st.cap[i] = math.Max(rate*1.25, floor)
				case full && step:
					st.cap[i] *= 1.1
				case !full && step:
					st.cap[i] = math.Max(st.cap[i]*0.9, floor)
					if st.cap[i] <= floor && s.Now.Sub(st.full[i]) >= c.Window {
						st.state[i], st.cap[i], st.since[i] = prioOff, 0, s.Now
					}
				}
			case prioFree:
				if own, _ := congested(i); !full || !own {
					// The accesses before it have room, or it has: capped
					// again, from below what it carries.
					st.state[i], st.cap[i], st.since[i] = prioOverflow, math.Max(rate*0.8, floor), s.Now
				}
			}
			name := m.accesses[i].Name
			switch st.state[i] {
			case prioOff:
				decide(i, true, 0, fmt.Sprintf("lower priority: carries nothing while the accesses before it have room (%s)", up))
			case prioOverflow:
				decide(i, false, st.cap[i], fmt.Sprintf("overflow: the accesses before it are congested (%s); capped at %s, carries %s", up, mbit(st.cap[i]), mbit(rate)))
				v.st.summary += fmt.Sprintf("; %s takes the overflow, up to %s", name, mbit(st.cap[i]))
			case prioFree:
				decide(i, false, 0, fmt.Sprintf("overflow: the accesses before it are congested (%s) and it fills any cap: uncapped, carries %s", up, mbit(rate)))
				v.st.summary += fmt.Sprintf("; %s takes the overflow, uncapped", name)
			}
			ci, w := congested(i)
			full = full && st.state[i] == prioFree && ci
			upWhy = append(upWhy, name+" "+w)
			upRate += rate
		}
	}
	return out
}

func (m *priorityBased) forget(tok uint32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.conns, tok)
}

func (m *priorityBased) opensSubflows() bool { return false }
func (m *priorityBased) requirements() Requirements {
	return Requirements{Limits: true, NotSentLowat: capNotSentLowat}
}

func (m *priorityBased) status() any {
	m.mu.Lock()
	defer m.mu.Unlock()
	names := []string{"off", "overflow", "free"}
	out := map[string]any{}
	for tok, st := range m.conns {
		acc := map[string]string{}
		for _, i := range m.r.order {
			s := names[st.state[i]]
			if st.cap[i] > 0 {
				s += " " + mbit(st.cap[i])
			}
			acc[m.accesses[i].Name] = s
		}
		out[fmt.Sprintf("%08x", tok)] = acc
	}
	return out
}
