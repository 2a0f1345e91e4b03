package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// ATSSS steers connections the way 3GPP's ATSSS rules say (TS 23.501
// §5.32.8, TS 24.193): a list of rules, each a traffic descriptor (the
// server end's prefixes and ports, the application's cgroup) and a
// steering mode over the accesses, first match wins, then a default. Each
// rule's mode is a policy of its own over the rule's connections
// (atsss_modes.go): active-standby runs prefer, the others decide backup
// flags and rate caps from what each access of a connection carries.
// Before any mode, the rule's thresholds (Rel-17) take an access out of
// use while its RTT or loss exceeds them, and an access whose subflows all
// stalled is unavailable (atsss_meter.go).
type ATSSS struct {
	mu       sync.Mutex
	env      Env
	accesses []Access
	rules    []*atsssRule
	// mesh opens the subflows of the connections a rule steers under the
	// userspace path manager (where no subflow is opened unless a policy
	// asks), but for active-standby's, which prefer opens.
	mesh       *Fullmesh
	conns      map[uint32]*atsssConn
	lastSample time.Time
	round      uint64
	status     ATSSSStatus
}

type atsssRule struct {
	ATSSSRule
	mode steering
}

// steering is a rule's mode: it decides over the rule's connections,
// given what each access of each connection is (connView).
type steering interface {
	// decide returns backup and limit decisions (and, for a mode that
	// opens subflows, lifecycle actions) for the rule's connections. s is
	// the round's snapshot narrowed to them, its outcomes those of the
	// actions on them.
	decide(s *Snapshot, views []*connView) []Action
	// forget drops what the mode keeps for a connection it no longer has.
	forget(tok uint32)
	// opensSubflows: under the userspace path manager the mode opens its
	// connections' subflows itself.
	opensSubflows() bool
	requirements() Requirements
	status() any
}

// connView is one connection as its rule's mode sees it in a round.
type connView struct {
	c   *Conn
	st  *atsssConn
	acc []accView // per access of the section, in its order
}

// accView is one access of a connection.
type accView struct {
	subflows []observe.Subflow
	meter    *accMeter
	// available: it has established subflows, not all stalled; usable:
	// available and not out of use by a threshold (unless every access
	// is); probing: out by a threshold, on a probe now.
	available, usable, probing bool
	why                        string // why it is not usable
}

// atsssConn is what the policy keeps per connection.
type atsssConn struct {
	rule   int // index into the rules; -1: none
	meters []*accMeter
	gates  []gate
	// Set by the mode each round for status: a line on the connection,
	// and per access what it does and why.
	summary string
	doing   []string
	// note: what the thresholds did to the round (set aside).
	note string
	// seen: the last round that saw the connection.
	seen uint64
}

// ATSSSStatus is the policy's status.
type ATSSSStatus struct {
	Accesses    map[string][]string `json:"accesses"` // name → local addresses now
	Rules       []ATSSSRuleStatus   `json:"rules"`
	Connections []ATSSSConnStatus   `json:"connections"`
}

// ATSSSRuleStatus is one rule.
type ATSSSRuleStatus struct {
	Name        string   `json:"name"`
	Where       string   `json:"where"`
	Match       string   `json:"match"`
	Mode        string   `json:"mode"`
	Params      string   `json:"params,omitempty"`
	Connections []string `json:"connections"`
	ModeStatus  any      `json:"mode_status,omitempty"`
}

// ATSSSConnStatus is one connection: its rule and mode, and per access
// whether it is used and why.
type ATSSSConnStatus struct {
	Token    string                       `json:"token"`
	Rule     string                       `json:"rule"`
	Mode     string                       `json:"mode"`
	Summary  string                       `json:"summary,omitempty"`
	Accesses map[string]ATSSSAccessStatus `json:"accesses,omitempty"`
}

// ATSSSAccessStatus is one access of a connection.
type ATSSSAccessStatus struct {
	Subflows  int     `json:"subflows"`
	Available bool    `json:"available"`
	Usable    bool    `json:"usable"`
	SRTTMs    float64 `json:"srtt_ms,omitempty"`
	RateMbit  float64 `json:"rate_mbit"`
	Doing     string  `json:"doing"`
	Gate      string  `json:"threshold,omitempty"`
}

// BuildATSSS builds the policy from the config's atsss section; problems
// are recorded in m's error list with their line and key.
func BuildATSSS(m *yamlcfg.Map, env Env) *ATSSS {
	accesses, rules := ParseATSSS(m, env)
	return NewATSSS(env, accesses, rules)
}

// NewATSSS builds the policy from checked accesses and rules.
func NewATSSS(env Env, accesses []Access, rules []ATSSSRule) *ATSSS {
	p := &ATSSS{env: env, accesses: accesses, conns: map[uint32]*atsssConn{}}
	for _, r := range rules {
		ar := &atsssRule{ATSSSRule: r}
		ar.mode = newSteering(env, accesses, &ar.ATSSSRule)
		p.rules = append(p.rules, ar)
	}
	if env.PathManager == UserspacePM {
		p.mesh = NewFullmesh(env)
		p.mesh.ConnStallTimeout = 0
		for _, a := range accesses {
			p.mesh.filter.Allow = append(p.mesh.filter.Allow, a.Targets...)
		}
	}
	return p
}

// Name is "atsss".
func (p *ATSSS) Name() string { return "atsss" }

// Cgroups lists the cgroups the rules select applications by: the daemon
// resolves the connections' cgroups at and below them.
func (p *ATSSS) Cgroups() []string {
	var out []string
	for _, r := range p.rules {
		if r.Match.Cgroup != "" {
			out = append(out, r.Match.Cgroup)
		}
	}
	return out
}

// accessOf maps the local addresses of the accesses to their index.
func (p *ATSSS) accessOf() (map[netip.Addr]int, map[string][]string) {
	out := map[netip.Addr]int{}
	shown := map[string][]string{}
	for i, a := range p.accesses {
		shown[a.Name] = []string{}
		for _, t := range a.Targets {
			var addrs []netip.Addr
			if ad, err := netip.ParseAddr(t); err == nil {
				addrs = []netip.Addr{ad.Unmap()}
			} else if p.env.Addrs != nil {
				addrs, _ = p.env.Addrs(t)
			}
			for _, ad := range addrs {
				if _, taken := out[ad]; !taken {
					out[ad] = i
					shown[a.Name] = append(shown[a.Name], ad.String())
				}
			}
		}
	}
	return out, shown
}

// match is the index of the first rule a connection matches (the default
// last), or -1.
func (p *ATSSS) match(c *Conn) int {
	for i, r := range p.rules {
		if r.Default {
			return i
		}
		ok, known := r.Match.Match(c)
		if !known {
			return -1 // its addresses are not known yet: no rule before they are
		}
		if ok {
			return i
		}
	}
	return -1
}

// keep is how much history the meters hold: the longest window a rule
// reads.
func (p *ATSSS) keep() time.Duration {
	k := 2 * time.Second
	for _, r := range p.rules {
		k = max(k, r.SmallestDelay.RTTWindow, r.Priority.Window)
		if r.Mode == ModeLoadBalancing {
			k = max(k, r.LoadBalancing.Window, r.LoadBalancing.RateWindow)
		}
		if r.Thresholds != nil {
			k = max(k, r.Thresholds.LossWindow)
		}
	}
	return k + time.Second
}

// Decide matches every connection to its rule, measures its accesses,
// applies the thresholds and runs each rule's mode over its connections.
func (p *ATSSS) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	sampled := s.Sampled
	if sampled.IsZero() {
		sampled = s.Now
	}
	newPoint := sampled.After(p.lastSample)
	if newPoint {
		p.lastSample = sampled
	}
	byAddr, shown := p.accessOf()
	keep := p.keep()
	views := make([][]*connView, len(p.rules))
	var mesh []*Conn
	var out []Action
	st := ATSSSStatus{Accesses: shown}
	p.round++
	round := p.round
	for _, c := range s.Conns {
		ri := p.match(c)
		cs := p.conns[c.Token]
		if cs == nil {
			cs = &atsssConn{rule: -1}
			for range p.accesses {
				cs.meters = append(cs.meters, newAccMeter())
			}
			cs.gates = make([]gate, len(p.accesses))
			p.conns[c.Token] = cs
		}
		cs.seen = round
		if cs.rule != ri {
			if cs.rule >= 0 {
				p.rules[cs.rule].mode.forget(c.Token)
			}
			cs.rule = ri
			cs.gates = make([]gate, len(p.accesses))
		}
		if ri < 0 {
			continue
		}
		r := p.rules[ri]
		v := &connView{c: c, st: cs, acc: make([]accView, len(p.accesses))}
		var none []observe.Subflow
		for _, sf := range c.Subflows {
			if i, ok := byAddr[sf.Local.Addr().Unmap()]; ok {
				v.acc[i].subflows = append(v.acc[i].subflows, sf)
			} else {
				none = append(none, sf)
			}
		}
		cs.summary, cs.note, cs.doing = "", "", make([]string, len(p.accesses))
		p.judge(s.Now, sampled, newPoint, keep, &r.ATSSSRule, v)
		views[ri] = append(views[ri], v)
		if p.mesh != nil && !r.mode.opensSubflows() {
			mesh = append(mesh, c)
		}
		for _, sf := range none {
			out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: true,
				Reason: fmt.Sprintf("atsss rule %s (%s): %s is on no access of the atsss section", r.Name, r.Mode, sf.Local.Addr())})
		}
	}
	for ri, r := range p.rules {
		sub := &Snapshot{Now: s.Now, Sampled: s.Sampled}
		in := map[uint32]bool{}
		for _, v := range views[ri] {
			sub.Conns = append(sub.Conns, v.c)
			in[v.c.Token] = true
		}
		for _, o := range s.Outcomes {
			if in[o.Action.Token] && (o.Action.Policy == p.Name() || o.Action.Policy == "") {
				sub.Outcomes = append(sub.Outcomes, o)
			}
		}
		acts := r.mode.decide(sub, views[ri])
		out = append(out, p.override(r, views[ri], acts)...)
		rs := ATSSSRuleStatus{Name: r.Name, Where: r.Where, Match: r.Match.String(), Mode: r.Mode, Params: r.params(p.accesses), Connections: []string{}, ModeStatus: r.mode.status()}
		if r.Default {
			rs.Match = "every connection no rule matches"
		}
		for _, v := range views[ri] {
			rs.Connections = append(rs.Connections, fmt.Sprintf("%08x", v.c.Token))
			st.Connections = append(st.Connections, p.connStatus(r, v))
		}
		st.Rules = append(st.Rules, rs)
	}
	if p.mesh != nil && len(mesh) > 0 {
		sub := &Snapshot{Now: s.Now, Sampled: s.Sampled, Conns: mesh}
		in := map[uint32]bool{}
		for _, c := range mesh {
			in[c.Token] = true
		}
		for _, o := range s.Outcomes {
			if in[o.Action.Token] && o.Action.Policy == p.Name() {
				o.Action.Policy = p.mesh.Name()
				sub.Outcomes = append(sub.Outcomes, o)
			}
		}
		out = append(out, p.mesh.Decide(sub)...)
	}
	for tok, cs := range p.conns {
		if cs.seen != round && !s.Quiet[tok] {
			if cs.rule >= 0 {
				p.rules[cs.rule].mode.forget(tok)
			}
			delete(p.conns, tok)
		}
	}
	sort.Slice(st.Connections, func(i, j int) bool { return st.Connections[i].Token < st.Connections[j].Token })
	p.status = st
	return out
}

// judge measures a connection's accesses at a new point and says which
// are available and usable.
func (p *ATSSS) judge(now, sampled time.Time, newPoint bool, keep time.Duration, r *ATSSSRule, v *connView) {
	anyUsable := false
	for i := range v.acc {
		a := &v.acc[i]
		a.meter = v.st.meters[i]
		if newPoint {
			a.meter.add(sampled, a.subflows, keep)
		}
		if len(a.subflows) == 0 {
			a.why = "no subflow on this access"
			continue
		}
		stalls := 0
		var why string
		for _, sf := range a.subflows {
			if st, w := stalled(sf); st {
				stalls++
				why = w
			}
		}
		if stalls == len(a.subflows) {
			a.why = "unavailable: " + why
			continue
		}
		a.available = true
		g := &v.st.gates[i]
		if r.Thresholds != nil {
			g.step(now, r.Thresholds, a.meter, newPoint)
			if g.out {
				a.probing = g.probing(now)
				a.why = "out of use: " + g.why
				continue
			}
		}
		a.usable = true
		anyUsable = true
	}
	if anyUsable || r.Thresholds == nil {
		return
	}
	// Every available access is over a threshold: the thresholds are set
	// aside (the mode runs over all of them) until one is back under. The
	// gates go on: their probes are judged as they come (the accesses
	// carry traffic meanwhile anyway).
	for i := range v.acc {
		a := &v.acc[i]
		if a.available {
			a.usable, a.probing = true, false
			a.why = ""
		}
	}
	v.st.note = "every available access is over a threshold: thresholds set aside"
}

// override puts the thresholds' decisions before the mode's: an access
// out of use is backup, and usable while it is probed, at the
// thresholds' probe_rate (its subflows together) from the probe's start
// until it is back in use (a probe's end does not lift the cap: what the
// probe left queued on its subflows drains at that rate); under
// modes other than active-standby (where prefer judges availability
// itself) an unavailable access is backup too. Every reason names the
// rule and its mode.
func (p *ATSSS) override(r *atsssRule, views []*connView, acts []Action) []Action {
	taken := map[SubflowID]bool{}
	var out []Action
	prefix := fmt.Sprintf("atsss rule %s (%s): ", r.Name, r.Mode)
	for _, v := range views {
		for i, a := range v.acc {
			name := p.accesses[i].Name
			for _, sf := range a.subflows {
				var act *Action
				switch {
				case a.probing:
					act = &Action{Kind: Backup, Backup: false, Reason: fmt.Sprintf("%s %s; probed now: it carries for one probe", name, a.why)}
					v.st.doing[i] = "probe (" + a.why + ")"
				case !a.usable && a.available:
					act = &Action{Kind: Backup, Backup: true, Reason: name + " " + a.why}
					v.st.doing[i] = "nothing: " + a.why
				case !a.available && r.Mode != ModeActiveStandby:
					act = &Action{Kind: Backup, Backup: true, Reason: name + " " + a.why}
					v.st.doing[i] = "nothing: " + a.why
				}
				if act == nil {
					continue
				}
				act.Token, act.Subflow, act.Reason = v.c.Token, ID(sf), prefix+act.Reason
				taken[act.Subflow] = true
				out = append(out, *act)
				outOfUse := a.probing || !a.usable && a.available
				if outOfUse && r.Thresholds != nil && r.Thresholds.ProbeRate > 0 {
					out = append(out, Action{Kind: Limit, Token: v.c.Token, Subflow: act.Subflow,
						Rate: r.Thresholds.ProbeRate / units.Rate(len(a.subflows)), Reason: act.Reason + fmt.Sprintf(" (at most %s until back in use)", r.Thresholds.ProbeRate)})
				}
			}
			if len(a.subflows) == 0 {
				v.st.doing[i] = "nothing: no subflow on this access"
			}
		}
	}
	for _, a := range acts {
		if (a.Kind == Backup || a.Kind == Limit) && taken[a.Subflow] {
			continue
		}
		if !strings.HasPrefix(a.Reason, "atsss rule ") {
			a.Reason = prefix + a.Reason
		}
		out = append(out, a)
	}
	return out
}

func (p *ATSSS) connStatus(r *atsssRule, v *connView) ATSSSConnStatus {
	summary := v.st.summary
	if v.st.note != "" {
		summary = strings.TrimSuffix(v.st.note+"; "+summary, "; ")
	}
	cs := ATSSSConnStatus{Token: fmt.Sprintf("%08x", v.c.Token), Rule: r.Name, Mode: r.Mode, Summary: summary, Accesses: map[string]ATSSSAccessStatus{}}
	now := p.lastSample
	for i, a := range v.acc {
		as := ATSSSAccessStatus{Subflows: len(a.subflows), Available: a.available, Usable: a.usable, Doing: v.st.doing[i]}
		if pt, ok := a.meter.latest(); ok {
			as.SRTTMs = float64(pt.srtt) / 1e6
		}
		if bps, _ := a.meter.rate(now, time.Second); bps > 0 {
			as.RateMbit = bps * 8 / 1e6
		}
		if g := v.st.gates[i]; g.out {
			as.Gate = fmt.Sprintf("out since %s: %s (probes %d)", g.since.Format("15:04:05.000"), g.why, g.probes)
		}
		cs.Accesses[p.accesses[i].Name] = as
	}
	return cs
}

// ConnSteering says, for `mpsteer status`, which rule and mode steer a
// connection and how ("" when no rule does).
func (p *ATSSS) ConnSteering(tok uint32) string {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.status.Connections {
		if c.Token != fmt.Sprintf("%08x", tok) {
			continue
		}
		s := fmt.Sprintf("atsss rule %s: %s", c.Rule, c.Mode)
		if c.Summary != "" {
			s += " — " + c.Summary
		}
		var names []string
		for n := range c.Accesses {
			names = append(names, n)
		}
		sort.Strings(names)
		for _, n := range names {
			if d := c.Accesses[n].Doing; d != "" {
				s += fmt.Sprintf("; %s: %s", n, d)
			}
		}
		return s
	}
	return ""
}

// Requirements are the modes' (prefer's RTO caps and probes under
// active-standby, rate caps under load-balancing and priority-based).
func (p *ATSSS) Requirements() Requirements {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Requirements{RTOMax: map[netip.Addr]time.Duration{}, SynRTO: map[netip.Addr]time.Duration{}}
	for _, rule := range p.rules {
		q := rule.mode.requirements()
		r.Limits = r.Limits || q.Limits
		r.JoinBackup = r.JoinBackup || q.JoinBackup
		if r.NotSentLowat == 0 {
			r.NotSentLowat = q.NotSentLowat
		}
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
	}
	return r
}

// Status is the rules, and per connection its rule, its mode and what
// each access does and why.
func (p *ATSSS) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

// params is the rule's mode parameters in a line.
func (r *ATSSSRule) params(accesses []Access) string {
	name := func(i int) string {
		if i < 0 || i >= len(accesses) {
			return "?"
		}
		return accesses[i].Name
	}
	var s string
	switch r.Mode {
	case ModeActiveStandby:
		s = fmt.Sprintf("active %s, standby %s", name(r.active), name(r.standby))
	case ModeSmallestDelay:
		s = fmt.Sprintf("margin %s (at least %s), rtt over %s, probes every %s", r.SmallestDelay.Margin, r.SmallestDelay.MinMargin, r.SmallestDelay.RTTWindow, r.SmallestDelay.ProbeInterval)
	case ModeLoadBalancing:
		if r.split == nil {
			s = "split autonomous (MPTCP's own aggregation)"
		} else {
			var parts []string
			for i, f := range r.split {
				parts = append(parts, fmt.Sprintf("%s %.4g%%", name(i), f*100))
			}
			s = "split " + strings.Join(parts, " / ")
		}
	case ModePriority:
		var parts []string
		for _, i := range r.order {
			parts = append(parts, name(i))
		}
		s = "priority " + strings.Join(parts, " > ")
	}
	if t := r.Thresholds; t != nil {
		var th []string
		if t.RTT > 0 {
			th = append(th, "rtt "+t.RTT.String())
		}
		if t.Loss > 0 {
			th = append(th, "loss "+t.Loss.String())
		}
		s += fmt.Sprintf("; thresholds %s (hysteresis %s)", strings.Join(th, ", "), t.Hysteresis)
	}
	return s
}
