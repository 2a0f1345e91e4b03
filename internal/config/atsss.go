package config

import (
	"mpsteer/internal/policy"
	"mpsteer/internal/yamlcfg"
)

// The atsss section: 3GPP ATSSS rules (traffic descriptors and steering
// modes over named accesses, first match wins, then a default), built
// into the atsss policy and run before every other policy:
//
//	atsss:
//	  accesses: {wifi: wlan0, cell: wwan0}
//	  rules:
//	    - {name: video, match: {ports: [443]}, mode: load-balancing, split: {wifi: 70%, cell: 30%}}
//	  default: {mode: active-standby, active: wifi}
//
// docs/daemon.md ("ATSSS steering modes") says what each mode does.

// addATSSS reads the atsss section as the first policy.
func (cfg *Config) addATSSS(m *yamlcfg.Map, env policy.Env, seen map[string]bool) {
	am := m.Map("atsss")
	if am == nil {
		return
	}
	p := policy.BuildATSSS(am, env)
	seen[p.Name()] = true
	cfg.Policies = append(cfg.Policies, p)
	cfg.PolicyKeys = append(cfg.PolicyKeys, "atsss: "+am.Canonical())
}
