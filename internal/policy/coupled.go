package policy

import (
	"strings"

	"mpsteer/internal/yamlcfg"
)

// Coupled couples the congestion control of the subflows of each MPTCP
// connection (of its scope, with cgroup:), so that a connection takes no
// more from a shared bottleneck than one TCP flow would, and moves its
// traffic off congested paths: LIA (RFC 6356) or BALIA, BPF congestion
// controls the daemon loads on MPTCP subflows alone (plain TCP keeps the
// host's default). It makes no per-subflow decisions: its requirement
// is the program.
//
//	policies:
//	  - {name: coupled, algorithm: lia}
//	  - {name: coupled, algorithm: balia, cgroup: /system.slice/backup.service}
//
// A connection in two scopes runs the innermost scope's algorithm (its
// cgroup's program runs first); of two entries for one cgroup the first
// counts.
type Coupled struct {
	Algorithm string
}

// CoupledAlgorithms are the algorithms (internal/sockops/coupled has them).
var CoupledAlgorithms = []string{"lia", "balia"}

// CoupledScope is one cgroup's coupled congestion control ("" cgroup:
// every connection).
type CoupledScope struct {
	Cgroup    string
	Algorithm string
}

// CoupledConfig is what coupled reads of its config entry.
type CoupledConfig struct {
	// Algorithm is the coupled congestion control (lia or balia).
	Algorithm string `yaml:"algorithm" enum:"lia,balia"`
}

func buildCoupled(m *yamlcfg.Map, env Env) Policy {
	var c CoupledConfig
	yamlcfg.Decode(m, &c)
	if c.Algorithm == "" && !m.Failed("algorithm") {
		m.Errorf("algorithm", "name the coupled congestion control (valid: %s)", strings.Join(CoupledAlgorithms, ", "))
	}
	return &Coupled{Algorithm: c.Algorithm}
}

// Name is "coupled".
func (p *Coupled) Name() string { return "coupled" }

// Decide decides nothing: the congestion control acts on every ACK.
func (p *Coupled) Decide(*Snapshot) []Action { return nil }

// SkipsQuiet: it has no decisions to keep.
func (p *Coupled) SkipsQuiet() bool { return true }

// CoupledStatus names the algorithm.
type CoupledStatus struct {
	Algorithm string `json:"algorithm"`
}

// Status names the algorithm.
func (p *Coupled) Status() any { return CoupledStatus{Algorithm: p.Algorithm} }

// Requirements ask for the algorithm on every connection (Scoped narrows
// it to its cgroup).
func (p *Coupled) Requirements() Requirements {
	return Requirements{Coupled: []CoupledScope{{Algorithm: p.Algorithm}}}
}
