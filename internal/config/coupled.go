package config

import (
	"strings"
	"sync"

	"mpsteer/internal/policy"
	"mpsteer/internal/sockops/coupled"
	"mpsteer/internal/yamlcfg"
)

// The coupled congestion control (policy coupled) is also a top-level key,
// for every connection of the host:
//
//	coupled: lia
//
// is the policy {name: coupled, algorithm: lia}, listed first. Either is
// refused on a kernel that cannot run the algorithms (coupled.Supported).

// coupledSupport says why the kernel cannot run coupled congestion
// controls (nil: it can); a variable so that tests can stand in for the
// kernel.
var coupledSupport = sync.OnceValue(coupled.Supported)

// addCoupled reads the top-level coupled key as a policy.
func (cfg *Config) addCoupled(m *yamlcfg.Map, seen map[string]bool) {
	if !m.Has("coupled") {
		return
	}
	alg := m.Enum("coupled", "", policy.CoupledAlgorithms...)
	if m.Failed("coupled") {
		return
	}
	if alg == "" {
		m.Errorf("coupled", "name the coupled congestion control (valid: %s)", strings.Join(policy.CoupledAlgorithms, ", "))
		return
	}
	p := &policy.Coupled{Algorithm: alg}
	if !checkCoupled(m, "coupled", p) {
		return
	}
	seen[p.Name()] = true
	cfg.Policies = append(cfg.Policies, p)
	cfg.PolicyKeys = append(cfg.PolicyKeys, "coupled: "+alg)
}

// checkCoupled refuses a coupled policy (scoped or not) on a kernel that
// cannot run it, at key; it reports whether p may stay.
func checkCoupled(m *yamlcfg.Map, key string, p policy.Policy) bool {
	if s, ok := p.(*policy.Scoped); ok {
		p = s.Inner
	}
	if _, ok := p.(*policy.Coupled); !ok {
		return true
	}
	if err := coupledSupport(); err != nil {
		m.Errorf(key, "coupled congestion control cannot run on this kernel: %v", err)
		return false
	}
	return true
}
