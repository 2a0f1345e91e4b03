package config

import (
	"strings"

	"mpsteer/internal/policy"
	"mpsteer/internal/yamlcfg"
)

// The coupled congestion control (policy coupled) is also a top-level key,
// for every connection of the host:
//
//	coupled: lia
//
// is the policy {name: coupled, algorithm: lia}, listed first. The daemon
// refuses either on a kernel that cannot run the algorithms (its kernel
// check: kernelfeat's coupled-cc).

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
	seen[p.Name()] = true
	cfg.addPolicy(p, "coupled: "+alg, m.Where("coupled"))
}
