package actuator

import (
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// Applier makes the kernel hold what the policies want: the backup flags,
// the rate caps and the lifecycle actions of a plan, through one gate.
type Applier struct {
	Gate      *Gate
	Flags     Flags
	Rates     *Rates
	Lifecycle *Lifecycle
}

// Apply makes the flags and caps of plan hold for the established
// subflows est (the whole namespace). refresh: a sample round (the kernel's
// endpoints are read again, refusals that no one asks about any more are
// forgotten). The caps go first: a subflow that a round both caps and
// takes out of backup (a probe under the ATSSS thresholds) is capped
// before MPTCP may hand it data (the pacing way applies a cap at once,
// sockops.Pacer), not one burst later.
func (a *Applier) Apply(plan policy.Plan, est []observe.Subflow, joins Joins, refresh bool, now time.Time) []api.ActionRecord {
	recs := a.Rates.Apply(plan.Limits, est, now)
	recs = append(recs, a.Flags.Apply(plan.Backup, est, Round{Now: now, Refresh: refresh, Joins: joins})...)
	if refresh {
		a.Gate.sweep()
	}
	return recs
}

// Restore undoes the flags and caps the applier set.
func (a *Applier) Restore() []api.ActionRecord {
	return append(a.Flags.Restore(), a.Rates.Restore()...)
}
