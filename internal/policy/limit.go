package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// StaticLimit caps the sending rate of every subflow from chosen
// interfaces or local addresses, e.g. a metered cellular link held to
// 5 Mbit/s while the Wi-Fi carries the rest. It is the rate action with
// no algorithm around it.
type StaticLimit struct {
	mu sync.Mutex
	StaticLimitConfig
	env    Env
	status []string
}

// StaticLimitConfig is what limit reads of its config entry.
type StaticLimitConfig struct {
	// Rates: interface or local address → cap.
	Rates rateCaps `yaml:"rates"`
}

// rateCaps maps interfaces or addresses to a cap above 0
// (rates: {wwan0: 5mbit}).
type rateCaps map[string]units.Rate

func (rc *rateCaps) DecodeField(m *yamlcfg.Map, key string) {
	r := m.Map(key)
	if r == nil {
		if !m.Failed(key) {
			m.Errorf(key, "name the caps, e.g. %s: {wwan0: 5mbit}", key)
		}
		return
	}
	*rc = rateCaps{}
	for _, k := range r.Keys() {
		if err := checkTarget(k); err != nil {
			r.Errorf(k, "%v", err)
			continue
		}
		v := r.Rate(k, 0)
		if v <= 0 && !r.Failed(k) {
			r.Errorf(k, "a cap must be above 0bit (leave the interface out for no cap)")
		}
		(*rc)[k] = v
	}
	r.Done()
}

func buildLimit(m *yamlcfg.Map, env Env) Policy {
	p := &StaticLimit{env: env}
	yamlcfg.Decode(m, &p.StaticLimitConfig)
	return p
}

// NewStaticLimit caps the given interfaces or addresses.
func NewStaticLimit(env Env, rates map[string]units.Rate) *StaticLimit {
	return &StaticLimit{StaticLimitConfig: StaticLimitConfig{Rates: rates}, env: env}
}

// Name is "limit".
func (p *StaticLimit) Name() string { return "limit" }

// Decide caps every subflow from a capped interface or address.
func (p *StaticLimit) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	caps := map[netip.Addr]units.Rate{}
	why := map[netip.Addr]string{}
	for k, r := range p.Rates {
		if a, err := netip.ParseAddr(k); err == nil {
			caps[a], why[a] = r, k
			continue
		}
		if p.env.Addrs != nil {
			addrs, _ := p.env.Addrs(k)
			for _, a := range addrs {
				if _, set := caps[a]; !set {
					caps[a], why[a] = r, k
				}
			}
		}
	}
	var out []Action
	var status []string
	for _, c := range s.Conns {
		for _, sf := range c.Subflows {
			r, ok := caps[sf.Local.Addr()]
			if !ok {
				continue
			}
			out = append(out, Action{Kind: Limit, Token: c.Token, Subflow: ID(sf), Rate: r,
				Reason: fmt.Sprintf("%s is capped at %s", why[sf.Local.Addr()], r)})
			status = append(status, fmt.Sprintf("%s capped at %s", ID(sf), r))
		}
	}
	sort.Strings(status)
	p.status = status
	return out
}

// Requirements: rates are capped.
func (p *StaticLimit) Requirements() Requirements { return Requirements{Limits: true} }

// Status lists the capped subflows.
func (p *StaticLimit) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]any{"rates": p.Rates, "capped": p.status}
}
