package policy

import (
	"sort"
	"strings"

	"mpsteer/internal/yamlcfg"
)

// Factory builds a policy from its config entry (the keys beside name):
// it decodes them into the policy's typed config (config.go) and records
// every problem in m's error list with its line and key.
type Factory func(m *yamlcfg.Map, env Env) Policy

// factories is every policy there is, by the name a config entry gives
// it: the one table, read where policies are built.
func factories() map[string]Factory {
	return map[string]Factory{
		"backup":      buildBackup,
		"coupled":     buildCoupled,
		"dynthresh":   buildDynThresh,
		"ecf":         buildECF,
		"fullmesh":    buildFullmesh,
		"incremental": buildIncremental,
		"limit":       buildLimit,
		"prefer":      buildPrefer,
		"ramptcp":     buildRAMPTCP,
		"spread":      buildSpread,
	}
}

// Names lists the policies there are.
func Names() []string {
	var out []string
	for n := range factories() {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Build creates the policy named by m's "name" key; problems are recorded
// in m's error list with their line and key. A key the policy does not
// use (in the mode its entry selects) is one of them.
func Build(m *yamlcfg.Map, env Env) Policy {
	name := m.String("name", "")
	f, ok := factories()[name]
	if !ok {
		if name == "" {
			m.Errorf("name", "every policy needs a name (valid: %s)", strings.Join(Names(), ", "))
		} else {
			m.Errorf("name", "unknown policy %q (valid: %s)", name, strings.Join(Names(), ", "))
		}
		return nil
	}
	p := f(m, env)
	m.Done()
	return p
}
