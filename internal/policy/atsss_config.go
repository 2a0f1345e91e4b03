package policy

import (
	"fmt"
	"math"
	"net/netip"
	"regexp"
	"sort"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// The atsss section of the daemon's config, read into the rules the
// ATSSS policy runs (atsss.go). Every problem names the file, line and
// key: an unknown access, a split that does not add up to 100%, a mode's
// missing parameter, a rule that can never match or that overlaps an
// earlier one in part.

// The steering modes (TS 23.501 §5.32.8), as the section names them.
const (
	ModeActiveStandby = "active-standby"
	ModeSmallestDelay = "smallest-delay"
	ModeLoadBalancing = "load-balancing"
	ModePriority      = "priority-based"
	ModeRedundant     = "redundant"
)

// Bounds of the section.
const (
	maxAccesses        = 8
	maxATSSSRules      = 64
	maxDescriptorItems = 64
)

// RedundantRefusal is why mode redundant is refused when the config
// loads.
const RedundantRefusal = "mode redundant is refused: upstream Linux's MPTCP scheduler sends each byte on one subflow, " +
	"and its packet scheduler cannot be replaced without a kernel patch (net.mptcp.available_schedulers lists only " +
	"\"default\"; BPF schedulers exist only in the MPTCP development tree), so the same data cannot go over both " +
	"accesses; nor can a datapath program copy one subflow's segments onto another (each subflow has its own sequence " +
	"space and DSS mappings, which the receiver checks). Use active-standby or smallest-delay for resilience"

// Access is one access network of the section: the interfaces or local
// addresses whose subflows go over it.
type Access struct {
	Name    string
	Targets []string
}

// ATSSSRule is one rule of the section (or its default, Default true):
// a traffic descriptor and a steering mode with its parameters.
type ATSSSRule struct {
	Name    string
	Where   string // file:line, for status and errors found later
	Default bool
	Match   TrafficDescriptor
	Mode    string
	// Mode parameters; accesses are indices into the section's accesses.
	ActiveStandby ActiveStandbyConfig
	SmallestDelay SmallestDelayConfig
	LoadBalancing LoadBalancingConfig
	Priority      PriorityConfig
	// Thresholds take an access out of use while exceeded (nil: none).
	Thresholds *ThresholdConfig
	// Resolved from the names above.
	active, standby int
	split           []float64 // per access (load-balancing; nil: autonomous)
	order           []int     // priority-based, high first
}

// ActiveStandbyConfig: one access carries the traffic, the other only
// while the first is unavailable (or over a threshold).
type ActiveStandbyConfig struct {
	Active  string `yaml:"active"`
	Standby string `yaml:"standby"`
}

// SmallestDelayConfig: the access with the smallest RTT carries the
// traffic.
type SmallestDelayConfig struct {
	// Margin: the traffic moves to another access only when that one's
	// RTT is this much smaller than the carrying one's...
	Margin units.Fraction `yaml:"margin" min:"0%" max:"100%"`
	// MinMargin: ... and at least this much smaller.
	MinMargin time.Duration `yaml:"min_margin" min:"0s" max:"10s"`
	// RTTWindow: an access's RTT is the smallest SRTT its subflows
	// reported over this window (its own queue's spikes do not count).
	RTTWindow time.Duration `yaml:"rtt_window" min:"0s" max:"10s"`
	// ProbeInterval: an access that does not carry the traffic is made
	// usable this often, for a probe of 2 of its RTTs (at least 200 ms),
	// so that its RTT stays measured.
	ProbeInterval time.Duration `yaml:"probe_interval" min:"100ms" max:"1h"`
}

// LoadBalancingConfig: a fixed split of the bytes over the accesses, or
// (split: autonomous) MPTCP's own aggregation.
type LoadBalancingConfig struct {
	Split splitSpec `yaml:"split"`
	// Window: the shares the split is held to are counted over this
	// window of the connection's bytes.
	Window time.Duration `yaml:"window" min:"1s" max:"1h"`
	// RateWindow: each access's rate is measured over this window.
	RateWindow time.Duration `yaml:"rate_window" min:"200ms" max:"10s"`
}

// PriorityConfig: the high-priority access carries everything until it
// is congested; only the overflow goes to the next.
type PriorityConfig struct {
	// Order: the accesses, high priority first.
	Order []string `yaml:"priority"`
	// Window and LimitedShare: an access is congested when it was
	// data waited to be sent on it (waits) in LimitedShare of the samples
	// over Window.
	Window       time.Duration  `yaml:"window" min:"100ms" max:"10s"`
	LimitedShare units.Fraction `yaml:"limited_share" above:"0%" max:"100%"`
}

// ThresholdConfig: Rel-17's thresholds. An access whose RTT or loss
// exceeds its threshold carries nothing (but its probes) until it is
// back under the threshold less the hysteresis.
type ThresholdConfig struct {
	RTT        time.Duration  `yaml:"rtt" min:"0s" max:"1h"`
	Loss       units.Fraction `yaml:"loss" min:"0%" max:"100%"`
	Hysteresis units.Fraction `yaml:"hysteresis" min:"0%" max:"99%"`
	// ProbeInterval: an access out of use is probed this often: usable
	// for 2 of its RTTs (at least 200 ms), its RTT and loss measured.
	ProbeInterval time.Duration `yaml:"probe_interval" min:"100ms" max:"1h"`
	// ProbeRate caps what an access carries on a probe (its subflows
	// together): enough segments to measure RTT and loss, not a share
	// of the traffic. 0: uncapped.
	ProbeRate units.Rate `yaml:"probe_rate" min:"0bit" max:"100gbit"`
	// LossWindow and MinSegments: loss is retransmitted over sent
	// segments over the window, known once this many were sent in it.
	LossWindow  time.Duration `yaml:"loss_window" min:"100ms" max:"1h"`
	MinSegments int           `yaml:"min_segments" min:"1" max:"1000000"`
}

func defaultSmallestDelay() SmallestDelayConfig {
	return SmallestDelayConfig{Margin: 0.2, MinMargin: 2 * time.Millisecond, RTTWindow: 500 * time.Millisecond, ProbeInterval: time.Second}
}

func defaultLoadBalancing() LoadBalancingConfig {
	return LoadBalancingConfig{Window: 10 * time.Second, RateWindow: time.Second}
}

func defaultPriority() PriorityConfig {
	return PriorityConfig{Window: 500 * time.Millisecond, LimitedShare: 0.6}
}

func defaultThresholds() ThresholdConfig {
	return ThresholdConfig{Hysteresis: 0.2, ProbeInterval: time.Second, ProbeRate: 2 * units.Mbit, LossWindow: time.Second, MinSegments: 50}
}

// splitSpec is load-balancing's split: access → share, or autonomous.
type splitSpec struct {
	given      bool
	autonomous bool
	shares     map[string]units.Fraction
	order      []string // the accesses in the order the split names them
}

func (sp *splitSpec) DecodeField(m *yamlcfg.Map, key string) {
	n := yamlcfg.RawNode(m, key)
	if n == nil {
		return
	}
	sp.given = true
	switch n.Kind {
	case yaml.MappingNode:
		sm := m.Map(key)
		sp.shares = map[string]units.Fraction{}
		for _, k := range sm.Keys() {
			f := sm.Fraction(k, 0)
			if !sm.Failed(k) && (f < 0 || f > 1) {
				sm.Errorf(k, "%s is not a share (0%% to 100%%)", f)
			}
			sp.shares[k] = f
			sp.order = append(sp.order, k)
		}
	case yaml.ScalarNode:
		if v := m.String(key, ""); v == "autonomous" {
			sp.autonomous = true
		} else {
			m.Errorf(key, "%q is not a split: give a mapping of accesses to shares, e.g. {wifi: 70%%, cell: 30%%}, or autonomous", v)
		}
	default:
		m.Errorf(key, "a split is a mapping of accesses to shares, e.g. {wifi: 70%%, cell: 30%%}, or autonomous")
	}
}

// thresholdSpec reads thresholds: {rtt: 100ms, loss: 1%, ...}.
type thresholdSpec struct{ cfg *ThresholdConfig }

func (ts *thresholdSpec) DecodeField(m *yamlcfg.Map, key string) {
	if !m.Has(key) {
		return
	}
	tm := m.Map(key)
	if tm == nil {
		return // reported by Map
	}
	c := defaultThresholds()
	yamlcfg.Decode(tm, &c)
	if !tm.Has("rtt") && !tm.Has("loss") {
		tm.Errorf("", "thresholds need rtt, loss or both, e.g. {rtt: 150ms, loss: 2%%}")
	}
	if tm.Has("rtt") && c.RTT <= 0 && !tm.Failed("rtt") {
		tm.Errorf("rtt", "an RTT threshold must be above 0s (leave rtt out for none)")
	}
	if tm.Has("loss") && c.Loss <= 0 && !tm.Failed("loss") {
		tm.Errorf("loss", "a loss threshold must be above 0%% (leave loss out for none)")
	}
	tm.Done()
	ts.cfg = &c
}

// ruleCommon are the keys of every rule and of the default, whatever its
// mode.
type ruleCommon struct {
	Thresholds thresholdSpec `yaml:"thresholds"`
}

var accessNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,31}$`)

// parseAccesses reads accesses: {wifi: wlan0, cell: [wwan0, 10.3.0.1]}.
func parseAccesses(m *yamlcfg.Map, env Env) []Access {
	am := m.Map("accesses")
	if am == nil {
		if !m.Failed("accesses") {
			m.Errorf("accesses", "name the accesses, each with its interfaces or local addresses, e.g. accesses: {wifi: wlan0, cell: wwan0}")
		}
		return nil
	}
	var known map[string][]netip.Addr
	if env.Interfaces != nil {
		known = env.Interfaces()
	}
	var out []Access
	owner := map[string]string{}
	for _, name := range am.Keys() {
		if !accessNameRE.MatchString(name) {
			am.Errorf(name, "%q is not an access name (lower-case letters, digits, - and _, at most 32, e.g. wifi, 3gpp)", name)
			am.Has(name)
			continue
		}
		a := Access{Name: name}
		for _, t := range am.Strings(name) {
			if err := checkTarget(t); err != nil {
				am.Errorf(name, "%v", err)
				continue
			}
			if _, isAddr := netip.ParseAddr(t); isAddr != nil && known != nil {
				if _, ok := known[t]; !ok {
					if env.Addrs == nil {
						am.Errorf(name, "%q is not an interface of this host (interfaces with an address: %s)", t, strings.Join(sortedNames(known), ", "))
						continue
					}
					if _, ok := env.Addrs(t); !ok {
						am.Errorf(name, "%q is not an interface of this host (interfaces with an address: %s)", t, strings.Join(sortedNames(known), ", "))
						continue
					}
				}
			}
			if o, ok := owner[t]; ok {
				am.Errorf(name, "%s is in access %s already: an interface or address belongs to one access", t, o)
				continue
			}
			owner[t] = name
			a.Targets = append(a.Targets, t)
		}
		if len(a.Targets) == 0 && !am.Failed(name) {
			am.Errorf(name, "access %s has no interface or address", name)
		}
		out = append(out, a)
	}
	if len(out) < 2 && !am.Failed("") {
		am.Errorf("", "at least two accesses are needed (ATSSS steers over a 3GPP and a non-3GPP access), e.g. {wifi: wlan0, cell: wwan0}")
	}
	if len(out) > maxAccesses {
		am.Errorf("", "%d accesses; at most %d", len(out), maxAccesses)
	}
	am.Done()
	return out
}

func sortedNames(m map[string][]netip.Addr) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// parseDescriptor reads a rule's match: {to: [...], ports: [...], cgroup: ...}.
func parseDescriptor(m *yamlcfg.Map) (TrafficDescriptor, bool) {
	var d TrafficDescriptor
	mm := m.Map("match")
	if mm == nil {
		if !m.Failed("match") {
			m.Errorf("match", "a rule needs a traffic descriptor, e.g. match: {to: [203.0.113.0/24], ports: [443]} (a rule for every connection is the default: write it under default)")
		}
		return d, false
	}
	ok := true
	to := mm.Strings("to")
	for _, s := range to {
		p, err := ParseDestination(s)
		if err != nil {
			mm.Errorf("to", "%v", err)
			ok = false
			continue
		}
		d.To = append(d.To, p)
	}
	for _, s := range mm.Strings("ports") {
		r, err := ParsePortRange(s)
		if err != nil {
			mm.Errorf("ports", "%v", err)
			ok = false
			continue
		}
		d.Ports = append(d.Ports, r)
	}
	// Entries of one list that overlap are a mistake too (one is the
	// other, or the list was meant otherwise).
	for i := range d.To {
		for j := i + 1; j < len(d.To); j++ {
			if d.To[i].Overlaps(d.To[j]) {
				mm.Errorf("to", "%s and %s overlap: list each address once", d.To[i], d.To[j])
				ok = false
			}
		}
	}
	for i := range d.Ports {
		for j := i + 1; j < len(d.Ports); j++ {
			if d.Ports[i].From <= d.Ports[j].To && d.Ports[j].From <= d.Ports[i].To {
				mm.Errorf("ports", "%s and %s overlap: list each port once", d.Ports[i], d.Ports[j])
				ok = false
			}
		}
	}
	for _, k := range []string{"to", "ports"} {
		if n := len(mm.Strings(k)); n > maxDescriptorItems {
			mm.Errorf(k, "%d entries; at most %d", n, maxDescriptorItems)
			ok = false
		}
	}
	if mm.Has("cgroup") {
		d.Cgroup = mm.String("cgroup", "")
		if err := CheckCgroup(d.Cgroup); err != nil {
			mm.Errorf("cgroup", "%v", err)
			ok = false
		}
	}
	mm.Done()
	if ok && d.Any() && !mm.Failed("to") && !mm.Failed("ports") && !mm.Failed("cgroup") {
		m.Errorf("match", "an empty match matches every connection: that is the default rule (write it under default), or give to, ports or cgroup")
		ok = false
	}
	return d, ok && !mm.Failed("to") && !mm.Failed("ports") && !mm.Failed("cgroup")
}

// parseRule reads one rule (or the default) and checks its mode's
// parameters against the accesses.
func parseRule(m *yamlcfg.Map, accesses []Access, isDefault bool, index int) (ATSSSRule, bool) {
	r := ATSSSRule{Default: isDefault, Where: fmt.Sprintf("%s:%d", m.File(), m.Line()),
		SmallestDelay: defaultSmallestDelay(), LoadBalancing: defaultLoadBalancing(), Priority: defaultPriority(), active: -1, standby: -1}
	errsBefore := m.Errs().Count()
	if isDefault {
		r.Name = "default"
	} else {
		r.Name = m.String("name", fmt.Sprintf("rule-%d", index+1))
		if !accessNameRE.MatchString(r.Name) && !m.Failed("name") {
			m.Errorf("name", "%q is not a rule name (lower-case letters, digits, - and _, at most 32)", r.Name)
		}
		if r.Name == "default" {
			m.Errorf("name", "default names the default rule: give this rule another name")
		}
		r.Match, _ = parseDescriptor(m)
	}
	valid := []string{ModeActiveStandby, ModeSmallestDelay, ModeLoadBalancing, ModePriority, ModeRedundant}
	r.Mode = m.Enum("mode", "", valid...)
	if r.Mode == "" && !m.Failed("mode") {
		m.Errorf("mode", "every rule needs a steering mode (valid: %s)", strings.Join(valid[:4], ", "))
	}
	if r.Mode == ModeRedundant {
		m.Errorf("mode", "%s", RedundantRefusal)
	}
	var common ruleCommon
	modes := []configMode{
		{ModeActiveStandby, []any{&common, &r.ActiveStandby}},
		{ModeSmallestDelay, []any{&common, &r.SmallestDelay}},
		{ModeLoadBalancing, []any{&common, &r.LoadBalancing}},
		{ModePriority, []any{&common, &r.Priority}},
	}
	if r.Mode != "" && r.Mode != ModeRedundant {
		decodeMode(m, "atsss", "mode", r.Mode, false, modes)
	} else {
		// Without a mode, which keys are valid is unknown; the mode's own
		// error is the one to fix first.
		for _, k := range m.Keys() {
			m.Has(k)
		}
	}
	r.Thresholds = common.Thresholds.cfg

	byName := map[string]int{}
	var names []string
	for i, a := range accesses {
		byName[a.Name] = i
		names = append(names, a.Name)
	}
	access := func(key, name string) int {
		i, ok := byName[name]
		if !ok {
			m.Errorf(key, "unknown access %q (the accesses: %s)", name, strings.Join(names, ", "))
			return -1
		}
		return i
	}
	switch r.Mode {
	case ModeActiveStandby:
		c := r.ActiveStandby
		switch {
		case c.Active == "" && !m.Failed("active"):
			m.Errorf("mode", "active-standby needs active: ACCESS (one of %s), the access that carries the traffic", strings.Join(names, ", "))
		case c.Active != "":
			r.active = access("active", c.Active)
		}
		switch {
		case c.Standby != "":
			r.standby = access("standby", c.Standby)
			if r.standby >= 0 && r.standby == r.active {
				m.Errorf("standby", "the standby access is the active one (%s): name the other", c.Standby)
			}
		case len(accesses) == 2 && r.active >= 0:
			r.standby = 1 - r.active
		case r.active >= 0 && len(accesses) > 2:
			m.Errorf("mode", "active-standby needs standby: ACCESS with more than two accesses (one of %s)", strings.Join(names, ", "))
		}
	case ModeLoadBalancing:
		sp := r.LoadBalancing.Split
		switch {
		case !sp.given && !m.Failed("split"):
			m.Errorf("mode", "load-balancing needs split: a share per access adding up to 100%%, e.g. split: {%s: 70%%, %s: 30%%}, or split: autonomous", names[0], names[min(1, len(names)-1)])
		case sp.autonomous:
		case sp.shares != nil:
			r.split = make([]float64, len(accesses))
			var sum float64
			var parts []string
			bad := false
			for _, k := range sp.order {
				i, ok := byName[k]
				if !ok {
					m.Errorf("split", "unknown access %q (the accesses: %s)", k, strings.Join(names, ", "))
					bad = true
					continue
				}
				r.split[i] = float64(sp.shares[k])
				sum += float64(sp.shares[k])
				parts = append(parts, fmt.Sprintf("%s %s", k, sp.shares[k]))
			}
			if !bad && math.Abs(sum-1) > 1e-6 {
				m.Errorf("split", "the shares add up to %.4g%%, not 100%%: %s", sum*100, strings.Join(parts, " + "))
			}
		}
	case ModePriority:
		order := r.Priority.Order
		if len(order) == 0 && !m.Failed("priority") {
			m.Errorf("mode", "priority-based needs priority: the accesses, high priority first, e.g. priority: [%s]", strings.Join(names, ", "))
		}
		seen := map[int]bool{}
		for _, n := range order {
			i := access("priority", n)
			if i < 0 {
				continue
			}
			if seen[i] {
				m.Errorf("priority", "%s is listed twice", n)
				continue
			}
			seen[i] = true
			r.order = append(r.order, i)
		}
		if len(order) == 1 && !m.Failed("priority") {
			m.Errorf("priority", "one access carries everything: that is active-standby; list at least two")
		}
	}
	if r.Mode == ModeSmallestDelay && r.SmallestDelay.RTTWindow > r.SmallestDelay.ProbeInterval*4 && !m.Failed("rtt_window") {
		m.Errorf("rtt_window", "%v is longer than 4 probe intervals (%v): a probe's RTT would hardly ever count", r.SmallestDelay.RTTWindow, r.SmallestDelay.ProbeInterval)
	}
	m.Done()
	return r, m.Errs().Count() == errsBefore
}

// checkRules refuses a rule that can never match (earlier rules, alone
// or together, match every connection it does), two rules that select by
// the same fields (both by destination, say) and overlap in part (some
// connections match both, neither contains the other: a typo, most
// likely; nest them, the narrower first, or make them disjoint), and a
// default no connection can reach. Rules that select by different fields
// may overlap (by application, and by destination): the first that
// matches wins, and status says which one did.
func checkRules(items []yamlcfg.Item, rules []ATSSSRule, def *yamlcfg.Map) {
	for j := range rules {
		m := items[j].Map
		var earlier []TrafficDescriptor
		var who []string
		for i := 0; i < j; i++ {
			a, b := rules[i], rules[j]
			earlier = append(earlier, a.Match)
			if b.Match.Within(a.Match) {
				m.Errorf("match", "rule %s can never match: rule %s (%s) matches every connection it does (%s)", b.Name, a.Name, a.Where, a.Match)
				continue
			}
			ov := a.Match.Overlap(b.Match)
			if ov == "" {
				continue
			}
			who = append(who, a.Name)
			if a.Match.Within(b.Match) || a.Match.fields() != b.Match.fields() {
				continue // the narrower first, or by other fields: first match wins
			}
			m.Errorf("match", "rule %s overlaps rule %s (%s) in part: connections to %s match both, and both select by %s; make them disjoint, or make one contain the other and list the narrower first",
				b.Name, a.Name, a.Where, ov, a.Match.fields())
		}
		if m.Failed("match") {
			continue
		}
		if covered, ok := rules[j].Match.CoveredBy(earlier); ok && covered {
			m.Errorf("match", "rule %s can never match: rules %s together match every connection it does", rules[j].Name, strings.Join(who, ", "))
		}
	}
	if def == nil {
		return
	}
	var all []TrafficDescriptor
	for _, r := range rules {
		all = append(all, r.Match)
	}
	if covered, ok := (TrafficDescriptor{}).CoveredBy(all); ok && covered {
		def.Errorf("", "the default can never match: the rules together match every connection; drop it, or narrow a rule")
	}
}

// steers reports whether a mode is one the policy runs.
func steers(mode string) bool {
	switch mode {
	case ModeActiveStandby, ModeSmallestDelay, ModeLoadBalancing, ModePriority:
		return true
	}
	return false
}

// ParseATSSS reads the atsss section (m: its mapping) into its accesses
// and rules, the default last; problems are recorded in m's error list.
func ParseATSSS(m *yamlcfg.Map, env Env) ([]Access, []ATSSSRule) {
	accesses := parseAccesses(m, env)
	var rules []ATSSSRule
	var ruleItems []yamlcfg.Item
	items := m.List("rules")
	if len(items) > maxATSSSRules {
		m.Errorf("rules", "%d rules; at most %d", len(items), maxATSSSRules)
		items = items[:maxATSSSRules]
	}
	names := map[string]string{}
	allOK := true
	for i, it := range items {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a rule is a mapping: {name, match, mode, and the mode's keys}")
			allOK = false
			continue
		}
		r, ok := parseRule(it.Map, accesses, false, i)
		allOK = allOK && ok
		if w, dup := names[r.Name]; dup {
			it.Map.Errorf("name", "rule %s is named twice (first at %s)", r.Name, w)
		}
		names[r.Name] = r.Where
		if steers(r.Mode) {
			rules = append(rules, r)
			ruleItems = append(ruleItems, it)
		}
	}
	dm := m.Map("default")
	if allOK {
		checkRules(ruleItems, rules, dm)
	}
	if dm != nil {
		if r, _ := parseRule(dm, accesses, true, len(rules)); steers(r.Mode) {
			rules = append(rules, r)
		}
	}
	if len(items) == 0 && dm == nil && !m.Failed("rules") && !m.Failed("default") {
		m.Errorf("rules", "the section steers nothing: give rules, a default, or both")
	}
	m.Done()
	return accesses, rules
}
