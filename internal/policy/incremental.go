package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// Incremental is eMPTCP's path manager (paper: emptcp-full-extensibility,
// use case 2). Every connection starts on its initial subflow alone; the
// next subflow opens once the connection has carried more than the next
// step (e.g. 200KiB, then 2MiB), so that short flows finish as single-path
// TCP would and long ones grow onto more paths. Only subflows that share
// no link with those in use are added: the config names the interfaces
// (or local addresses) whose paths share a link, and two subflows from one
// local address always share its access link.
type Incremental struct {
	mu sync.Mutex
	IncrementalConfig
	// filter and open hold the rest of its keys: interfaces and exclude;
	// backoff, max_backoff and join_timeout.
	filter ifaceFilter
	// shared maps an interface or address to its group of paths that
	// share a link.
	shared map[string]int
	env    Env
	open   opener
	status []IncrementalConnStatus
}

// IncrementalConnStatus is one connection as incremental sees it.
type IncrementalConnStatus struct {
	Token       string       `json:"token"`
	Transferred uint64       `json:"transferred_bytes"`
	NextStep    string       `json:"next_step,omitempty"`
	Subflows    int          `json:"subflows"`
	Pairs       []PairStatus `json:"pairs,omitempty"`
	Waiting     string       `json:"waiting,omitempty"`
}

// IncrementalConfig is what incremental reads of its config entry, with
// the interface filter's keys and the opener's (subflows.go).
type IncrementalConfig struct {
	// Steps: bytes carried (sent and received) before the 2nd, the 3rd, …
	// subflow opens.
	Steps sizeSteps `yaml:"steps"`
	// Shared: groups of interfaces (or addresses) whose paths share a link.
	Shared linkGroups `yaml:"shared"`
}

// sizeSteps is a list of sizes that grow ([200KiB, 2MiB]).
type sizeSteps []units.Size

func (st *sizeSteps) DecodeField(m *yamlcfg.Map, key string) {
	if !m.Has(key) {
		return
	}
	var out sizeSteps
	for _, s := range m.Strings(key) {
		v, err := units.ParseSize(s)
		if err != nil {
			m.Errorf(key, "%v", err)
			continue
		}
		if n := len(out); n > 0 && v <= out[n-1] {
			m.Errorf(key, "%s is not above the step before it (%s): steps grow", v, out[n-1])
		}
		out = append(out, v)
	}
	if len(out) == 0 && !m.Failed(key) {
		m.Errorf(key, "name at least one step, e.g. [200KiB, 2MiB]")
	}
	*st = out
}

// linkGroups are groups of two or more interfaces (or addresses), each in
// one group only ([[lte, dsl]]).
type linkGroups [][]string

func (lg *linkGroups) DecodeField(m *yamlcfg.Map, key string) {
	seen := map[string]bool{}
	for _, group := range m.StringLists(key) {
		if len(group) < 2 {
			m.Errorf(key, "%v: a group of paths that share a link needs at least two interfaces", group)
		}
		for _, n := range group {
			if err := checkTarget(n); err != nil {
				m.Errorf(key, "%v", err)
			}
			if seen[n] {
				m.Errorf(key, "%q is in two groups: merge them", n)
			}
			seen[n] = true
		}
		*lg = append(*lg, group)
	}
}

func buildIncremental(m *yamlcfg.Map, env Env) Policy {
	p := NewIncremental(env)
	yamlcfg.Decode(m, &p.IncrementalConfig)
	yamlcfg.Decode(m, &p.filter)
	yamlcfg.Decode(m, &p.open)
	p.filter.check(m, env)
	p.open.check(m)
	for _, g := range p.Shared {
		p.addGroup(g)
	}
	requireUserspacePM(m, env, "incremental")
	return p
}

// NewIncremental makes the policy with the paper's flavour of steps:
// 200KiB, then 2MiB.
func NewIncremental(env Env) *Incremental {
	return &Incremental{IncrementalConfig: IncrementalConfig{Steps: sizeSteps{200 << 10, 2 << 20}}, shared: map[string]int{}, env: env, open: newOpener()}
}

// Name is "incremental".
func (p *Incremental) Name() string { return "incremental" }

// SetShared declares groups of interfaces (or addresses) that share a link.
func (p *Incremental) SetShared(groups ...[]string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.shared = map[string]int{}
	for _, g := range groups {
		p.addGroup(g)
	}
}

func (p *Incremental) addGroup(g []string) {
	id := len(p.shared) + 1
	for _, n := range g {
		p.shared[n] = id
	}
}

// group is the shared-link group of a local address (0: none).
func (p *Incremental) group(l localAddr) int {
	if g, ok := p.shared[l.Addr.String()]; ok {
		return g
	}
	return p.shared[l.Iface]
}

// Decide opens the next subflow of a connection when it has carried
// more than the next step.
func (p *Incremental) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	locals := p.filter.locals(p.env)
	ifaceOf := map[netip.Addr]localAddr{}
	for _, l := range locals {
		ifaceOf[l.Addr] = l
	}
	var out []Action
	var status []IncrementalConnStatus
	live := map[uint32]bool{}
	for _, c := range s.Conns {
		live[c.Token] = true
		out = append(out, p.open.observe(s.Now, c, s.Outcomes, p.Name())...)
		if c.ServerSide || !c.Established {
			continue // the client grows its connection, once MPTCP is up
		}
		cs := IncrementalConnStatus{Token: fmt.Sprintf("%08x", c.Token), Transferred: c.BytesSent + c.BytesRecv}
		out = append(out, p.grow(s.Now, c, locals, ifaceOf, &cs)...)
		status = append(status, cs)
	}
	p.open.forget(live)
	p.status = status
	return out
}

func (p *Incremental) grow(now time.Time, c *Conn, locals []localAddr, ifaceOf map[netip.Addr]localAddr, cs *IncrementalConnStatus) []Action {
	// The pairs in use or under way, and the links they take.
	var candidates []pair
	inUse := map[pair]bool{}
	n := 0
	for _, r := range remotes(c) {
		for _, l := range locals {
			if l.Addr.Is4() != r.Addr().Is4() {
				continue
			}
			pr := pair{l.Addr, r}
			candidates = append(candidates, pr)
			if k := p.open.underWay(c.Token, pr); k > 0 {
				inUse[pr] = true
				n += k
			}
		}
	}
	// Subflows on pairs outside the candidates (the initial one, when
	// its address is not in the allow list) count too.
	for _, sf := range append(append([]observe.Subflow{}, c.Subflows...), c.Pending...) {
		if pr := pairOf(sf); !inUse[pr] {
			found := false
			for _, cand := range candidates {
				found = found || cand == pr
			}
			if !found {
				inUse[pr] = true
				n++
			}
		}
	}
	cs.Subflows = n
	transferred := c.BytesSent + c.BytesRecv
	k := n - 1 // steps passed so far
	if n == 0 || k >= len(p.Steps) {
		return nil
	}
	cs.NextStep = p.Steps[k].String()
	if transferred <= uint64(p.Steps[k]) {
		cs.Waiting = fmt.Sprintf("%d of %s carried", transferred, p.Steps[k])
		return nil
	}
	shares := func(cand pair) bool {
		lc := ifaceOf[cand.Local]
		for u := range inUse {
			if u.Local == cand.Local {
				return true // one local address: one access link
			}
			lu, ok := ifaceOf[u.Local]
			if !ok {
				continue
			}
			if g := p.group(lc); g != 0 && g == p.group(lu) {
				return true
			}
		}
		return false
	}
	// Pairs that failed before come last (not every remote address is
	// reachable from every local one), then those still backing off.
	sort.SliceStable(candidates, func(i, j int) bool {
		return p.open.fails(c.Token, candidates[i]) < p.open.fails(c.Token, candidates[j])
	})
	var waiting *pair
	for _, cand := range candidates {
		if inUse[cand] || shares(cand) {
			continue
		}
		if !p.open.ready(now, c.Token, cand) {
			if waiting == nil {
				waiting = &cand
			}
			continue
		}
		cs.Pairs = append(cs.Pairs, p.open.pairStatus(now, c.Token, cand, 1))
		reason := fmt.Sprintf("carried %d B > step %d (%s): subflow %d on a path that shares no link with those in use", transferred, k+1, p.Steps[k], n+1)
		return p.open.open(now, c, cand, 1, ifaceOf[cand.Local].Iface, reason)
	}
	if waiting != nil {
		cs.Pairs = append(cs.Pairs, p.open.pairStatus(now, c.Token, *waiting, 1))
		cs.Waiting = "backing off after failures on every remaining path"
		return nil
	}
	cs.Waiting = "every remaining path shares a link with one in use"
	return nil
}

// Status reports every connection's growth.
func (p *Incremental) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}
