package daemon

import (
	"mpsteer/internal/actuator"
	"mpsteer/internal/api"
	"mpsteer/internal/policy"
	"time"
)

// recordLog keeps what the daemon did: the recent action records (all
// kinds), the recent lifecycle actions per connection, and which refusals
// and unsupported actions were already logged.
type recordLog struct {
	recent      []api.ActionRecord
	connActions map[uint32][]api.ActionRecord
	// warned: unsupported lifecycle actions already reported, by policy
	// and kind (the policy keeps asking).
	warned map[string]bool
	// refusedLogged: refusals already logged, by policy, kind and target,
	// with the kernel's reason.
	refusedLogged map[string]string
	// stateErr: the crash state could not be read or written.
	stateErr string
}

func (r *recordLog) init() {
	r.connActions = map[uint32][]api.ActionRecord{}
	r.warned = map[string]bool{}
}

// add logs the records (a refusal once), hands them to the metrics and
// the monitor, and keeps the last api.RecentActions.
func (r *recordLog) add(d *Daemon, acts ...api.ActionRecord) {
	for _, a := range acts {
		if a.Kind == "state" {
			r.stateErr = a.Error
		}
		if r.logOnce(a) {
			d.log.Print(a.String())
		}
	}
	d.ops.recorded(acts) // metrics, monitor
	r.recent = append(r.recent, acts...)
	if n := len(r.recent); n > api.RecentActions {
		r.recent = r.recent[n-api.RecentActions:]
	}
}

// logOnce reports whether an action record should be logged: a refusal is
// logged the first time, and again only when the kernel's reason changes
// or after the same change was applied in between; records that are not
// refusals are always logged. Status, metrics and the monitor see every
// record.
func (r *recordLog) logOnce(a api.ActionRecord) bool {
	key := a.Policy + "|" + a.Kind + "|" + a.Target
	if a.Result != string(policy.Refused) {
		delete(r.refusedLogged, key)
		return true
	}
	if r.refusedLogged == nil || len(r.refusedLogged) > 4096 {
		r.refusedLogged = map[string]string{}
	}
	if r.refusedLogged[key] == a.Error {
		return false
	}
	r.refusedLogged[key] = a.Error
	return true
}

// lifecycle records the outcomes of lifecycle actions: each per
// connection too (the last 32), an unsupported one once per policy and
// kind.
func (r *recordLog) lifecycle(d *Daemon, outs []policy.Outcome) {
	for _, o := range outs {
		rec := actuator.OutcomeRecord(o)
		if o.Result == policy.Unsupported {
			key := o.Action.Policy + "/" + string(o.Action.Kind)
			if r.warned[key] {
				continue
			}
			r.warned[key] = true
		}
		r.add(d, rec)
		tok := o.Action.Token
		r.connActions[tok] = append(r.connActions[tok], rec)
		if n := len(r.connActions[tok]); n > 32 {
			r.connActions[tok] = r.connActions[tok][n-32:]
		}
	}
}

// forget drops the records of connections that are gone.
func (r *recordLog) forget(live func(uint32) bool) {
	for tok := range r.connActions {
		if !live(tok) {
			delete(r.connActions, tok)
		}
	}
}

// applyLifecycle takes the lifecycle actions of a round and keeps their
// outcomes for the policies' next round and for status.
func (d *Daemon) applyLifecycle(acts []policy.Action, snap *policy.Snapshot, now time.Time) {
	if len(acts) == 0 {
		return
	}
	byTok := map[uint32]*policy.Conn{}
	for _, c := range snap.Conns {
		byTok[c.Token] = c
	}
	outs := d.apply.life.Apply(acts, byTok, now)
	d.outcomes = append(d.outcomes, outs...)
	d.records.lifecycle(d, outs)
}
