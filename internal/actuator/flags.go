package actuator

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// PM is what the actuators ask of the path manager (a *pm.Client).
type PM interface {
	Endpoints() ([]pm.Endpoint, error)
	AddEndpoint(e pm.Endpoint) (pm.Endpoint, error)
	SetEndpointFlags(e pm.Endpoint) error
	DelEndpoint(e pm.Endpoint) error
	Limits() (pm.Limits, error)
	SetSubflowFlags(token uint32, local, remote netip.AddrPort, flags pm.Flags) error
	SubflowCreate(token uint32, local pm.Endpoint, remote netip.AddrPort) error
	SubflowDestroy(token uint32, local, remote netip.AddrPort) error
	Announce(token uint32, e pm.Endpoint) error
	Remove(token uint32, localID uint8) error
}

// Yielded is the result of a change the daemon did not make because
// another manager made a different one (it is reported once, not fought).
const Yielded = "yielded"

// Round is what one reconcile round gives the flag actuator besides the
// decisions.
type Round struct {
	Now time.Time
	// Refresh: read the kernel's endpoints again (a sample round) rather
	// than trust the last read and the daemon's own changes since.
	Refresh bool
	// Joins: which new subflows the policies want to join as backup.
	Joins Joins
}

// Joins is which new subflows the policies want to join as backup (from
// their requirements, not from per-subflow decisions: a join has none
// before it is seen).
type Joins struct {
	// Backup: every new subflow (policy.Requirements.JoinBackup).
	Backup bool
	// BackupAddrs: those from these local addresses, each with the
	// policy that asks (policy.Requirements.BackupAddrs).
	BackupAddrs map[netip.Addr]string
}

// Flags turns the policies' per-subflow backup decisions into kernel
// changes. Every round gives it the whole namespace: every established
// subflow and every decision, so that what no decision wants any more is
// undone and an address's flag is decided over every connection that
// uses it.
type Flags interface {
	Apply(dec map[policy.SubflowID]policy.Action, est []observe.Subflow, r Round) []api.ActionRecord
	// Reopen carries out one round's Reopen wishes (reopen.go): est and
	// joining are the namespace's established and joining subflows.
	Reopen(wants []policy.Action, est, joining []observe.Subflow, now time.Time) []api.ActionRecord
	// ReopenDue is when the next re-add, or the add of an endpoint a
	// re-add removed, is due (zero: none).
	ReopenDue() time.Time
	// ReopenPending: a re-add removed an endpoint and has yet to add it
	// again (Reopen must be called until it has, wished for or not).
	ReopenPending() bool
	// Restore undoes what the actuator changed (the daemon exits), where
	// no one else has changed it since.
	Restore() []api.ActionRecord
	Mode() string
	// Recheck: a flag the last round wants still has to reach a subflow
	// whose join had not completed (the kernel sends MP_PRIO only to
	// subflows whose join has), or an address was just made usable: the
	// daemon should look again soon.
	Recheck() bool
	// Joining: the subflows a flag the last round wants has yet to reach
	// because their join has not completed (as sampled): the daemon
	// watches them and samples again as soon as it has (joinwatch.go).
	Joining() []observe.Subflow
	// Endpoints describes the endpoints the actuator manages (nil when it
	// sets per-subflow flags).
	Endpoints() []api.EndpointStatus
	// SetScope changes which endpoints it may change (a reload).
	SetScope(s Scope)
}

// subflowFlags works with the userspace path manager: each subflow's
// backup flag is set on its own (MPTCP_PM_CMD_SET_FLAGS with a token).
type subflowFlags struct {
	c       PM
	gate    *Gate
	changed map[policy.SubflowID]uint32 // subflow → token, flags changed by us
	// joining: the last round's subflows whose flag must change and whose
	// join has not completed (the kernel would refuse the change).
	joining []observe.Subflow
	// reopenSaid: a Reopen was reported unsupported.
	reopenSaid bool
	// pathManager reads the namespace's path manager (a variable for the
	// tests): asked when the kernel refuses a flag.
	pathManager func() string
}

// NewSubflowFlags sets each subflow's own flag (userspace path manager).
func NewSubflowFlags(c PM, gate *Gate) Flags {
	return &subflowFlags{c: c, gate: gate, changed: map[policy.SubflowID]uint32{}, pathManager: observe.PathManager}
}

// refusal says why the kernel refused a subflow's own flag where the
// reason is that the kernel path manager runs the namespace: Linux 6.1
// says EINVAL and no more, later kernels "userspace PM not selected".
// Any other refusal is the kernel's as it came.
func (a *subflowFlags) refusal(err error) error {
	if err == nil || !errors.Is(err, unix.EINVAL) || a.pathManager() != observe.KernelPM {
		return err
	}
	return fmt.Errorf("a subflow's own backup flag needs the userspace path manager, and the kernel path manager runs this namespace: set %s here, or backup_via: endpoint (the kernel said: %w)",
		netnsutil.UserspacePMSetting(), err)
}

func (a *subflowFlags) Mode() string                    { return "subflow" }
func (a *subflowFlags) Recheck() bool                   { return len(a.joining) > 0 }
func (a *subflowFlags) Joining() []observe.Subflow      { return a.joining }
func (a *subflowFlags) Endpoints() []api.EndpointStatus { return nil }
func (a *subflowFlags) SetScope(Scope)                  {}

func (a *subflowFlags) Apply(dec map[policy.SubflowID]policy.Action, est []observe.Subflow, r Round) []api.ActionRecord {
	var acts []api.ActionRecord
	live := make(map[policy.SubflowID]bool, len(a.changed))
	a.joining = a.joining[:0]
	for _, sf := range est {
		id := policy.ID(sf)
		d, ok := dec[id]
		if _, mine := a.changed[id]; mine {
			live[id] = true
		}
		if !ok {
			if _, mine := a.changed[id]; mine && sf.BackupLocal {
				act := a.set(sf.Token, id, false, "", "no policy decides it any more", r.Now)
				acts = append(acts, act)
				if act.Result == string(policy.Applied) {
					delete(a.changed, id)
				}
			}
			continue
		}
		if sf.BackupLocal == d.Backup {
			continue
		}
		if sf.JoinIncomplete() {
			// The kernel sends MP_PRIO only once the join has completed
			// (and refuses before): the daemon watches for that.
			a.joining = append(a.joining, sf)
			continue
		}
		act := a.set(sf.Token, id, d.Backup, d.Policy, d.Reason, r.Now)
		if act.Result == "" {
			continue // held back by the gate
		}
		acts = append(acts, act)
		if act.Result == string(policy.Applied) {
			a.changed[id] = sf.Token
		}
	}
	for id := range a.changed {
		if !live[id] {
			delete(a.changed, id) // the subflow is gone
		}
	}
	return acts
}

// set changes one subflow's flag through the gate; a change the gate
// holds back gives a record without a result.
func (a *subflowFlags) set(token uint32, id policy.SubflowID, backup bool, who, reason string, now time.Time) api.ActionRecord {
	key := fmt.Sprintf("subflow %s %v", id, backup)
	if !a.gate.Ready(key, now) {
		return api.ActionRecord{}
	}
	var f pm.Flags
	if backup {
		f = pm.FlagBackup
	}
	err := a.refusal(a.c.SetSubflowFlags(token, id.Local.AddrPort(), id.Remote.AddrPort(), f))
	a.gate.Done(key, err, now)
	act := backupRecord(id.String(), token, backup, err)
	act.Policy, act.Reason = who, reason
	return act
}

func (a *subflowFlags) Restore() []api.ActionRecord {
	var acts []api.ActionRecord
	for id, tok := range a.changed {
		var f pm.Flags
		err := a.refusal(a.c.SetSubflowFlags(tok, id.Local.AddrPort(), id.Remote.AddrPort(), f))
		act := backupRecord(id.String(), tok, false, err)
		act.Reason = "daemon exit"
		acts = append(acts, act)
	}
	a.changed = map[policy.SubflowID]uint32{}
	return acts
}

// errNoEndpoints: the endpoints were never read.
var errNoEndpoints = errors.New("the path manager's endpoints could not be read")
