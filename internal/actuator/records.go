package actuator

import (
	"fmt"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/policy"
	"mpsteer/internal/units"
)

// record makes the record of one change the daemon made.
func record(kind, target string, err error) api.ActionRecord {
	r := api.ActionRecord{At: time.Now(), Kind: kind, Target: target, Result: string(policy.Applied)}
	if err != nil {
		r.Result, r.Error = string(policy.Refused), err.Error()
	}
	return r
}

// backupRecord is the record of a backup flag change.
func backupRecord(target string, token uint32, backup bool, err error) api.ActionRecord {
	r := record(string(policy.Backup), target, err)
	r.Backup = &backup
	if token != 0 {
		r.Token = fmt.Sprintf("%08x", token)
	}
	return r
}

func limitRecord(id policy.SubflowID, token uint32, r units.Rate, who, reason string, err error) api.ActionRecord {
	rec := record(string(policy.Limit), id.String(), err)
	rec.Token = fmt.Sprintf("%08x", token)
	rec.Rate = policy.RateText(r)
	rec.Policy, rec.Reason = who, reason
	return rec
}

// OutcomeRecord turns a policy action's outcome into a status record.
func OutcomeRecord(o policy.Outcome) api.ActionRecord {
	a := o.Action
	r := api.ActionRecord{At: o.At, Policy: a.Policy, Kind: string(a.Kind), Token: fmt.Sprintf("%08x", a.Token),
		Target: a.Target(), Result: string(o.Result), Error: o.Error, Reason: a.Reason}
	if a.Kind == policy.Backup {
		b := a.Backup
		r.Backup = &b
	}
	return r
}
