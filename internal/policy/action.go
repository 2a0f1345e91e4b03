package policy

import (
	"fmt"
	"net/netip"
	"time"
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
)

// Kinds lists every action kind, in the order status shows them.
var Kinds = []Kind{Backup, Create, Destroy, Announce, Withdraw}

// Action is one change a policy asks for, with its reason.
type Action struct {
	Kind  Kind
	Token uint32
	// Subflow is the subflow acted on (Backup, Destroy) or to open
	// (Create: the local port may be 0).
	Subflow SubflowID
	// Backup is the flag a Backup action sets.
	Backup bool
	// Addr is the local address to Announce or Withdraw (port optional).
	Addr netip.AddrPort
	// Iface binds a Create to a local interface (optional).
	Iface  string
	Reason string
	// Policy is filled in by the engine.
	Policy string
}

// Target names what the action acts on, for keys and messages.
func (a Action) Target() string {
	switch a.Kind {
	case Announce, Withdraw:
		return a.Addr.String()
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
	s := fmt.Sprintf("%s %s on %08x", a.Kind, a.Target(), a.Token)
	if a.Kind == Backup {
		s = fmt.Sprintf("backup=%v %s on %08x", a.Backup, a.Target(), a.Token)
	}
	return s
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

// Plan is what the engine decided in one round: at most one backup
// decision per subflow (the first policy with an opinion wins) and every
// other action, once.
type Plan struct {
	Backup    map[SubflowID]Action
	Lifecycle []Action
}

// ForToken keeps what concerns one connection.
func (p Plan) ForToken(token uint32) Plan {
	out := Plan{Backup: map[SubflowID]Action{}}
	for id, a := range p.Backup {
		if a.Token == token {
			out.Backup[id] = a
		}
	}
	for _, a := range p.Lifecycle {
		if a.Token == token {
			out.Lifecycle = append(out.Lifecycle, a)
		}
	}
	return out
}
