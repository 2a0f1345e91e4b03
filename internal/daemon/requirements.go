package daemon

import (
	"maps"
	"slices"

	"mpsteer/internal/actuator"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// syncRequirements keeps what the policies require outside per-subflow
// decisions in place (under mu): joins as backup, the health program, the
// rate program, avoid_initial, rto_max and the SYN timeout, the coupled
// congestion controls, the sampler that reads BBR's state. It asks the
// policies (which may resolve interfaces), so it runs on sample rounds and
// after reloads, not on every event.
func (d *Daemon) syncRequirements() {
	req := d.engine.Requirements()
	d.apply.joins = actuator.Joins{Backup: req.JoinBackup, BackupAddrs: req.BackupAddrs}
	d.sampleOnJoin = req.SampleOnJoin
	d.syncHealth(req) // health.go
	if req.Limits {
		if err := d.apply.rates.Ready(); err != nil {
			d.log.Printf("rate caps cannot be set (rate_via: %s): %v", d.cfg.RateVia, err)
		}
		if err := d.apply.rates.AtOnceProblem(); err != nil {
			d.log.Printf("rate caps take hold on each subflow's next ACK, not at once (an idle subflow's first burst is not capped): %v", err)
		}
	}
	d.syncInitial(req)
	d.syncRTO(req)
	d.syncCoupled(req)           // coupled.go
	d.needBBRState(req.BBRState) // sampler.go
}

// syncRTO keeps the rto_max and SYN timeout program in line with the
// policies: loaded on first need, said once when it cannot be.
func (d *Daemon) syncRTO(req policy.Requirements) {
	p := &d.progs
	if len(req.RTOMax) == 0 && len(req.SynRTO) == 0 && p.rto == nil {
		return
	}
	if p.rto == nil {
		if p.rtoErr != "" {
			return // tried and failed; said so once
		}
		r, err := sockops.NewRTOCapper(d.cookie)
		if err != nil {
			p.rtoErr = err.Error()
			d.log.Printf("rto_max is not enforced: %v", err)
			return
		}
		p.rto = r
	}
	if err := p.rto.Set(req.RTOMax); err != nil {
		d.log.Printf("rto_max map: %v", err)
	}
	if err := p.rto.SetSynRTO(req.SynRTO); err != nil {
		d.log.Printf("SYN timeout map: %v", err)
	}
	// Subflows established before these requirements (a hint or reload
	// at run time, a daemon started after its connections) get them too:
	// the sockops program acts at establishment only.
	if !maps.Equal(p.rtoApplied, req.RTOMax) || p.notsentApplied != req.NotSentLowat || !slices.Equal(p.exceptApplied, req.NotSentLowatExcept) {
		if err := p.rto.ApplyToExisting(req.NotSentLowat, req.NotSentLowatExcept); err != nil {
			if p.existingErr != err.Error() {
				d.log.Printf("existing subflows keep their RTO cap and unsent queue: %v", err)
			}
			p.existingErr = err.Error()
			return
		}
		p.rtoApplied, p.notsentApplied, p.existingErr = maps.Clone(req.RTOMax), req.NotSentLowat, ""
		p.exceptApplied = slices.Clone(req.NotSentLowatExcept)
	}
}

// syncInitial keeps the avoid_initial program in line with the policies:
// loaded while a policy marks paths volatile, bound to the address the
// policy chose (none while no such address is up), unloaded when no
// policy asks any more. Connections already open are not touched.
func (d *Daemon) syncInitial(req policy.Requirements) {
	p := &d.progs
	if len(req.InitialAvoid) == 0 {
		if p.initial != nil {
			p.initial.Close()
			p.initial = nil
			d.log.Printf("avoid_initial: off")
		}
		return
	}
	if p.initial == nil {
		if p.initialErr != "" {
			return // tried and failed; said so once
		}
		b, err := sockops.NewInitialBinder(d.cookie)
		if err != nil {
			p.initialErr = err.Error()
			d.log.Printf("avoid_initial is not enforced: %v", err)
			return
		}
		p.initial = b
	}
	if p.initial.Addr() == req.InitialAddr {
		return
	}
	if err := p.initial.Set(req.InitialAddr); err != nil {
		d.log.Printf("avoid_initial: %v", err)
		return
	}
	if req.InitialAddr.IsValid() {
		d.log.Printf("avoid_initial: new MPTCP connections start from %s (volatile: %v)", req.InitialAddr, req.InitialAvoid)
	} else {
		d.log.Printf("avoid_initial: no address to start from that is not volatile (volatile: %v); connections start where routing sends them", req.InitialAvoid)
	}
}
