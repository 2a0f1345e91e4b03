package daemon

import (
	"net/netip"
	"time"

	"mpsteer/internal/actuator"
	"mpsteer/internal/api"
	"mpsteer/internal/config"
	"mpsteer/internal/crashstate"
	"mpsteer/internal/datapath"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// applier is the daemon's actuator.Applier with what built it: the
// config's backup_via and rate_via and the path manager, so that a reload
// or a switched path manager rebuilds what changed (undoing what the old
// one did first).
type applier struct {
	actuator.Applier
	flags     actuator.Flags
	rates     *actuator.Rates
	life      *actuator.Lifecycle
	backupVia string
	rateVia   string
	joins     actuator.Joins // the last requirements synced
	// reopening: the last round had Reopen wishes (the flag actuator is
	// told once when they stop); reopenAddrs their addresses.
	reopening   bool
	reopenAddrs map[netip.Addr]bool
	// read reads the namespace's subflows now (for removing and
	// re-adding endpoints).
	read actuator.SubflowReader
}

func newApplier(c actuator.PM, state *crashstate.File, cookie uint64, dp func() (*datapath.Manager, error), cfg *config.Config, pmMode string, read actuator.SubflowReader) applier {
	a := applier{backupVia: cfg.BackupVia, rateVia: cfg.RateVia, read: read}
	gate := &actuator.Gate{}
	a.flags = newFlags(c, gate, state, cfg, pmMode, read)
	a.rates = actuator.NewRates(cfg.RateVia, cookie, gate, dp)
	a.life = actuator.NewLifecycle(c, pmMode)
	a.Applier = actuator.Applier{Gate: gate, Flags: a.flags, Rates: a.rates, Lifecycle: a.life}
	return a
}

// newFlags picks the flag actuator backup_via says (auto: per subflow
// under the userspace path manager, else per endpoint).
func newFlags(c actuator.PM, gate *actuator.Gate, state *crashstate.File, cfg *config.Config, pmMode string, read actuator.SubflowReader) actuator.Flags {
	via := cfg.BackupVia
	if via == config.BackupAuto {
		via = config.BackupEndpoint
		if pmMode == policy.UserspacePM {
			via = config.BackupSubflow
		}
	}
	if via == config.BackupSubflow {
		return actuator.NewSubflowFlags(c, gate)
	}
	return actuator.NewEndpointFlags(c, gate, state, endpointScope(cfg), read)
}

func endpointScope(cfg *config.Config) actuator.Scope {
	return actuator.Scope{Manage: cfg.Endpoints.Manage, Leave: cfg.Endpoints.Leave, Resolve: ifaces.addrs, Interfaces: ifaces.all}
}

func (a *applier) apply(plan policy.Plan, est []observe.Subflow, refresh bool, now time.Time) []api.ActionRecord {
	return a.Apply(plan, est, a.joins, refresh, now)
}

func (a *applier) restore() []api.ActionRecord { return a.Restore() }

// newReopen notes the addresses of a round's Reopen wishes and reports
// whether one is new (the requirements are synced then: not every round).
func (a *applier) newReopen(wants []policy.Action) bool {
	if len(wants) == 0 {
		a.reopenAddrs = nil
		return false
	}
	if a.reopenAddrs == nil {
		a.reopenAddrs = map[netip.Addr]bool{}
	}
	fresh := false
	for _, w := range wants {
		if addr := w.Subflow.Local.Addr(); !a.reopenAddrs[addr] {
			a.reopenAddrs[addr], fresh = true, true
		}
	}
	return fresh
}

// followConfig makes the applier the one the config and the path manager
// call for (under mu): a changed backup_via (or, with auto, a switched path
// manager) restores what the old flag actuator did and starts the new one;
// a changed rate_via lifts the old caps.
func (d *Daemon) followConfig() {
	a := &d.apply
	a.life.SetMode(d.pmMode)
	a.flags.SetScope(endpointScope(d.cfg))
	if next := newFlagsMode(d.cfg, d.pmMode); d.cfg.BackupVia != a.backupVia || next != a.flags.Mode() {
		d.records.add(d, a.flags.Restore()...)
		a.flags = newFlags(d.pmc, a.Gate, d.state, d.cfg, d.pmMode, a.read)
		a.Flags, a.backupVia = a.flags, d.cfg.BackupVia
		d.log.Printf("backup flags are set per %s now (backup_via %s)", a.flags.Mode(), a.backupVia)
	}
	if d.cfg.RateVia != a.rateVia {
		d.records.add(d, a.rates.Restore()...)
		a.rates = actuator.NewRates(d.cfg.RateVia, d.cookie, a.Gate, d.manager)
		a.Rates, a.rateVia = a.rates, d.cfg.RateVia
	}
}

// newFlagsMode is the mode newFlags would pick.
func newFlagsMode(cfg *config.Config, pmMode string) string {
	switch cfg.BackupVia {
	case config.BackupSubflow:
		return "subflow"
	case config.BackupEndpoint:
		return "endpoint"
	}
	if pmMode == policy.UserspacePM {
		return "subflow"
	}
	return "endpoint"
}
