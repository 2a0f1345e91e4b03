package policy

import (
	"fmt"
	"net/netip"
	"time"

	"mpsteer/internal/units"
)

// Kind names what an action does. Every lever mpsteer has is one kind in
// this set; the daemon routes each kind to the actuator that can take it.
type Kind string

const (
	// Backup sets (Backup true) or clears a subflow's backup flag.
	Backup Kind = "backup"
	// Create opens a subflow from Subflow.Local (port 0: any) to
	// Subflow.Remote, optionally bound to the local interface Iface.
	Create Kind = "create"
	// Destroy closes Subflow; MPTCP moves what it held to the others.
	Destroy Kind = "destroy"
	// Announce advertises the local address Addr (ADD_ADDR) on the
	// connection.
	Announce Kind = "announce"
	// Withdraw takes an announced local address back (REMOVE_ADDR).
	Withdraw Kind = "withdraw"
	// Limit caps a subflow's sending rate at Rate; Rate 0 lifts the cap.
	// Like Backup it is a decision: a policy returns it every round for
	// the subflows it limits, and a cap no policy asks for any more is
	// lifted.
	Limit Kind = "limit"
	// Reopen asks for fresh subflows from the local address of Subflow
	// on the connection, its subflows there closed (they stalled): under
	// the kernel path manager the daemon re-adds the address's endpoint,
	// which acts on every connection using the address, so it does so
	// only while each of them asks, at most once per Interval. Like
	// Backup it is a wish a policy repeats every round while it holds.
	Reopen Kind = "reopen"
)

// Kinds lists every action kind, in the order status shows them.
var Kinds = []Kind{Backup, Limit, Create, Destroy, Announce, Withdraw, Reopen}

// decision kinds are per-subflow states, not one-off actions.
func (k Kind) decision() bool { return k == Backup || k == Limit }

// Action is one change a policy asks for, with its reason.
type Action struct {
	Kind  Kind
	Token uint32
	// Subflow is the subflow acted on (Backup, Destroy) or to open
	// (Create: the local port may be 0).
	Subflow SubflowID
	// Backup is the flag a Backup action sets; on a Create, the subflow
	// joins as backup (MP_JOIN with the B bit).
	Backup bool
	// Rate is the cap a Limit action sets (0: no cap).
	Rate units.Rate
	// NotSent: with a Limit, the subflow's TCP_NOTSENT_LOWAT while the
	// cap holds (0: left as it is), so that little waits unsent on a
	// held subflow; its own value comes back with the cap's lifting. The
	// pacing way only (the config's rate_via).
	NotSent units.Size `json:",omitempty"`
	// Addr is the local address to Announce or Withdraw (port optional).
	Addr netip.AddrPort
	// Iface binds a Create to a local interface (optional).
	Iface string
	// Interval: a Reopen is carried out at most this often.
	Interval time.Duration `json:",omitempty"`
	// Gone: a Reopen of an address that no interface has any more (the
	// interface went down): its subflows are closed now, so that MPTCP
	// sends what they held on the others, and the next Reopen, once the
	// address is back, is not held back by this one's pace.
	Gone bool `json:",omitempty"`
	// Own: a Reopen of the connection's own address (its initial
	// subflow's): the kernel numbers every subflow from it 0 on the wire,
	// whatever its endpoint, and it may have no endpoint at all.
	Own    bool `json:",omitempty"`
	Reason string
	// Policy is filled in by the engine.
	Policy string
}

// Target names what the action acts on, for keys and messages.
func (a Action) Target() string {
	switch a.Kind {
	case Announce, Withdraw:
		return a.Addr.String()
	case Reopen:
		return a.Subflow.Local.Addr().String() + "→" + a.Subflow.Remote.String()
	case Create:
		local := a.Subflow.Local.Addr().String()
		if a.Subflow.Local.Port() != 0 {
			local = a.Subflow.Local.String()
		}
		return local + "→" + a.Subflow.Remote.String()
	}
	return a.Subflow.String()
}

func (a Action) String() string {
	switch a.Kind {
	case Backup:
		return fmt.Sprintf("backup=%v %s on %08x", a.Backup, a.Target(), a.Token)
	case Limit:
		return fmt.Sprintf("limit=%s %s on %08x", RateText(a.Rate), a.Target(), a.Token)
	}
	return fmt.Sprintf("%s %s on %08x", a.Kind, a.Target(), a.Token)
}

// RateText prints a cap ("none" for no cap).
func RateText(r units.Rate) string {
	if r <= 0 {
		return "none"
	}
	return r.String()
}

// Result says what became of an action.
type Result string

const (
	// Applied: the kernel did it.
	Applied Result = "applied"
	// Refused: the kernel said no (Error says why).
	Refused Result = "refused"
	// Unsupported: the path manager in charge cannot do this at all.
	Unsupported Result = "unsupported"
)

// Outcome is what the daemon did with an action. Policies see the
// outcomes of their earlier actions in the next snapshot, so that a
// refused creation is retried with backoff rather than every round.
type Outcome struct {
	Action Action
	Result Result
	Error  string
	At     time.Time
}

// Plan is what the engine decided in one round: at most one backup and
// one limit decision per subflow (the first policy with an opinion wins)
// and every other action, once.
type Plan struct {
	Backup    map[SubflowID]Action
	Limits    map[SubflowID]Action
	Lifecycle []Action
}

// NewPlan is an empty plan.
func NewPlan() Plan {
	return Plan{Backup: map[SubflowID]Action{}, Limits: map[SubflowID]Action{}}
}

// ForToken keeps what concerns one connection.
func (p Plan) ForToken(token uint32) Plan {
	out := NewPlan()
	for id, a := range p.Backup {
		if a.Token == token {
			out.Backup[id] = a
		}
	}
	for id, a := range p.Limits {
		if a.Token == token {
			out.Limits[id] = a
		}
	}
	for _, a := range p.Lifecycle {
		if a.Token == token {
			out.Lifecycle = append(out.Lifecycle, a)
		}
	}
	return out
}
