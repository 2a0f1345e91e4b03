package policy

import (
	"sync"

	"mpsteer/internal/yamlcfg"
)

// ECF is eMPTCP's ECF-like traffic scheduler (paper: emptcp-full-
// extensibility, use case 3, after Lim et al.'s ECF and Ferlin et al.'s
// BLEST): every round (the daemon's interval, 100 ms) it sets a rate
// vector over each connection's subflows, sending on a slower path only
// what arrives no later than the main path could have delivered it (see
// shaper for the rule).
type ECF struct {
	mu     sync.Mutex
	sh     shaper
	status []ShapeConnStatus
}

func buildECF(m *yamlcfg.Map, env Env) Policy {
	p := NewECF()
	yamlcfg.Decode(m, &p.sh.ShaperConfig)
	return p
}

// NewECF makes the policy with its defaults (see newShaper).
func NewECF() *ECF {
	p := &ECF{sh: newShaper()}
	// (Its scenarios were measured without the startup guard.)
	p.sh.StartupGuard = false
	return p
}

// Name is "ecf".
func (p *ECF) Name() string { return "ecf" }

// Requirements: rates are capped, and little may wait unsent on a
// subflow (see shaper.NotSentLowat).
func (p *ECF) Requirements() Requirements { return p.sh.requirements() }

// Decide sets each connection's rate vector.
func (p *ECF) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []Action
	out, p.status = p.sh.decideAll(s)
	return out
}

// Status reports the last rate vectors.
func (p *ECF) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}
