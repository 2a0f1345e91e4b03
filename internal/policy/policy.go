// Package policy is mpsteer's decision logic, kept pure: a policy reads
// snapshots of the kernel's MPTCP state (connections and subflows as plain
// values, with the snapshot's time) and returns decisions. It never calls
// netlink or BPF, so each paper's algorithm stays small and is tested with
// recorded samples and a fake clock.
package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// SubflowID names a subflow by its addresses and ports.
type SubflowID struct {
	Local, Remote netip.AddrPort
}

func (id SubflowID) String() string { return id.Local.String() + "→" + id.Remote.String() }

// ID returns the identity of a sampled subflow.
func ID(sf observe.Subflow) SubflowID { return SubflowID{sf.Local, sf.Remote} }

// Conn is one MPTCP connection and its subflows.
type Conn struct {
	Token    uint32
	Subflows []observe.Subflow
	// BytesAcked is acknowledged at the connection level (MPTCP DATA_ACK:
	// what the receiver got in order); 0 when unknown.
	BytesAcked uint64
}

// Snapshot is what policies see: the time and the connections.
type Snapshot struct {
	Now   time.Time
	Conns []*Conn
}

// Decision is what a policy wants for one subflow: to be a backup subflow
// (the local sender avoids it while another is usable) or not.
type Decision struct {
	Token   uint32    `json:"token"`
	Subflow SubflowID `json:"-"`
	Backup  bool      `json:"backup"`
	Reason  string    `json:"reason"`
	Policy  string    `json:"policy"`
}

// Policy is one algorithm.
type Policy interface {
	Name() string
	// Decide returns decisions for the subflows it has an opinion on.
	Decide(s *Snapshot) []Decision
	// Status explains the policy's current state (for `mpsteer status`).
	Status() any
}

// Requirements are settings a policy needs outside per-subflow decisions.
type Requirements struct {
	// RTOMax caps the retransmission timeout of subflows from these local
	// addresses (TCP_RTO_MAX_MS, set by a BPF sockops program).
	RTOMax map[netip.Addr]time.Duration
}

// Requirer is implemented by policies with Requirements.
type Requirer interface {
	Requirements() Requirements
}

// Env is what a policy may ask of its host while it is built or decides.
type Env struct {
	// Addrs resolves an interface name to its addresses; ok is false when
	// there is no such interface.
	Addrs func(iface string) (addrs []netip.Addr, ok bool)
}

// Factory builds a policy from its config entry (the keys beside name).
type Factory func(m *yamlcfg.Map, env Env) Policy

var registry = map[string]Factory{}

// Register makes a policy available by name.
func Register(name string, f Factory) { registry[name] = f }

// Names lists the registered policies.
func Names() []string {
	var out []string
	for n := range registry {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Build creates the policy named by m's "name" key; problems are recorded
// in m's error list with their line and key.
func Build(m *yamlcfg.Map, env Env) Policy {
	name := m.String("name", "")
	f, ok := registry[name]
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

// Engine runs policies in order; for a subflow, the first policy with an
// opinion decides.
type Engine struct {
	Policies []Policy
}

// Decide merges the policies' decisions, one per subflow.
func (e *Engine) Decide(s *Snapshot) map[SubflowID]Decision {
	out := map[SubflowID]Decision{}
	for _, p := range e.Policies {
		for _, d := range p.Decide(s) {
			if _, taken := out[d.Subflow]; taken {
				continue
			}
			d.Policy = p.Name()
			out[d.Subflow] = d
		}
	}
	return out
}

// Requirements merges every policy's requirements (first policy wins).
func (e *Engine) Requirements() Requirements {
	r := Requirements{RTOMax: map[netip.Addr]time.Duration{}}
	for _, p := range e.Policies {
		q, ok := p.(Requirer)
		if !ok {
			continue
		}
		for a, d := range q.Requirements().RTOMax {
			if _, taken := r.RTOMax[a]; !taken {
				r.RTOMax[a] = d
			}
		}
	}
	return r
}

// Get returns the policy with this name, or nil.
func (e *Engine) Get(name string) Policy {
	for _, p := range e.Policies {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

func mbit(bps float64) string { return fmt.Sprintf("%.1fMbit/s", bps*8/1e6) }
