package daemon

import (
	"errors"
	"fmt"

	"mpsteer/internal/config"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/policy"
)

// kernelNeed is one feature a config asks of the kernel, with the key that
// asks for it.
type kernelNeed struct {
	feature kernelfeat.Name
	key     string
	// exactly: the feature itself, not its fallback (kernelfeat's
	// RequireExactly).
	exactly bool
}

// kernelNeeds lists what a config asks of the kernel beyond MPTCP and the
// path manager's netlink family, each with the config key that asks.
func kernelNeeds(cfg *config.Config) []kernelNeed {
	var needs []kernelNeed
	add := func(f kernelfeat.Name, key string) { needs = append(needs, kernelNeed{feature: f, key: key}) }
	if len(cfg.Mptcpize) > 0 {
		add(kernelfeat.UpdateSocketProto, cfg.MptcpizeWhere)
	}
	// Chains: TCX or clsact, and the kfuncs of 6.2 or the entries that read
	// without them.
	chains := func(key string) {
		add(kernelfeat.TCX, key)
		add(kernelfeat.KfuncRdonlyCast, key)
	}
	for _, c := range cfg.Chains {
		chains(c.Where)
	}
	if cfg.ReportHealth != nil {
		add(kernelfeat.SockopsHeaderOpts, cfg.ReportHealthWhere)
	}
	var capping []string
	for i, p := range cfg.Policies {
		where := fmt.Sprintf("policies[%d] (%s)", i, p.Name())
		if i < len(cfg.PolicyWhere) {
			where = cfg.PolicyWhere[i]
		}
		u := policy.UsesOf(p)
		if u.OpensSubflows {
			add(kernelfeat.UserspacePM, where)
		}
		if u.RTOMax > 0 && u.RTOMaxGiven {
			add(kernelfeat.SockopsRTOMax, where+": rto_max")
		}
		if u.HealthReports {
			add(kernelfeat.SockopsHeaderOpts, where)
		}
		if u.TCXOnly {
			needs = append(needs, kernelNeed{feature: kernelfeat.TCX, key: where, exactly: true})
		}
		if u.Coupled {
			add(kernelfeat.CoupledCC, where)
		}
		if u.RateCaps {
			capping = append(capping, where)
		}
	}
	for _, where := range capping {
		key := fmt.Sprintf("%s: rate_via: %s", where, cfg.RateVia)
		switch cfg.RateVia {
		case config.RatePacing:
			add(kernelfeat.SockopsPacingRate, key)
		case config.RateCC:
			add(kernelfeat.StructOpsCC, key)
		case config.RateRwnd:
			chains(key)
		}
	}
	return needs
}

// probeKernel reports the running kernel's features (a variable: tests
// stand in a kernel).
var probeKernel = kernelfeat.ProbeFeatures

// checkKernel refuses a config that asks for something the running kernel
// lacks (and that no older mechanism does instead), before any of it is
// put in place: each refusal names the feature, this kernel, the Linux
// version that introduced it and the config key that asked for it. Run
// and reload (SIGHUP, a changed file, `mpsteer policy apply`) call it on
// every config they are about to run. Only what the config asks for is
// probed, once per process.
func checkKernel(cfg *config.Config) error {
	needs := kernelNeeds(cfg)
	if len(needs) == 0 {
		return nil
	}
	var names []kernelfeat.Name
	for _, n := range needs {
		names = append(names, n.feature)
	}
	r := probeKernel(names...)
	var errs []error
	for _, n := range needs {
		var err error
		if n.exactly {
			err = kernelfeat.RequireExactly(r, n.feature, n.key)
		} else {
			err = kernelfeat.Require(r, n.feature, n.key)
		}
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
