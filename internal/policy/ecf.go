package policy

import (
	"math"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
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
func NewECF() *ECF { return &ECF{sh: newShaper()} }

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

// peak keeps the largest value seen over a window of time.
type peak struct{ e extreme[float64] }

func greater(a, b float64) bool { return a > b }

// add adds v, seen now, and returns the window's largest.
func (p *peak) add(now time.Time, v float64, window time.Duration) float64 {
	p.e.push(now, v, greater, 0)
	p.e.expire(now, window)
	return p.e.v[0]
}

// get is the window's maximum; ok is false when nothing was seen.
func (p *peak) get() (float64, bool) { return p.e.first() }

// max is the window's maximum (0: nothing seen).
func (p *peak) max() float64 {
	v, _ := p.get()
	return v
}

// baseRTT is a subflow's lowest RTT (its SRTT until the kernel has one).
func baseRTT(sf observe.Subflow) time.Duration {
	if sf.MinRTT > 0 {
		return sf.MinRTT
	}
	return sf.SRTT
}

// roundRate keeps a cap to three significant digits.
func roundRate(r units.Rate) units.Rate {
	if r <= 0 {
		return 0
	}
	scale := math.Pow(10, math.Floor(math.Log10(float64(r)))-2)
	return units.Rate(math.Round(float64(r)/scale) * scale)
}
