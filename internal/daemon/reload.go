package daemon

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"

	"mpsteer/internal/config"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// reload applies a new config, all or nothing: on any error the running
// config stays untouched. What did not change is left alone: chains whose
// declaration is the same keep their counters and state, and policies
// whose entry is the same keep theirs. The datapath's parts the config
// declares (chains, spread, mptcpize) are put in place here, so that the
// caller hears whether they could be; the flags and caps the policies
// want follow in the loop's next round, which the reload marks.
func (d *Daemon) reload(file string, data []byte) (string, error) {
	var cfg *config.Config
	var err error
	if data == nil {
		cfg, err = config.Load(file, hostEnv())
	} else {
		cfg, err = config.Parse(file, data, hostEnv())
	}
	if err != nil {
		return "", err
	}
	if err := checkKernel(cfg); err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loop.stopped {
		return "", errStopping
	}
	if cfg.Persist != d.cfg.Persist && d.dp != nil {
		return "", fmt.Errorf("%s: persist: %q cannot change while the daemon runs (it is %q; restart the daemon to change it)", file, cfg.Persist, d.cfg.Persist)
	}
	prepared, err := d.scope.checkMptcpize(cfg, d.cookie)
	if err != nil {
		return "", err
	}
	spreadRollback, err := d.reconcileSpread(cfg)
	if err != nil {
		if prepared != nil {
			prepared.Close()
		}
		return "", err
	}
	warnings, err := d.reconcileChains(cfg)
	if err != nil {
		spreadRollback()
		if prepared != nil {
			prepared.Close()
		}
		return "", err
	}
	// Nothing below can fail.
	if m := observe.PathManager(); m != d.pmMode {
		d.log.Printf("the path manager is %s now (was %s)", m, d.pmMode)
		d.pmMode = m
	}
	kept := 0
	for i, key := range cfg.PolicyKeys {
		for j, old := range d.cfg.PolicyKeys {
			if key == old && j < len(d.cfg.Policies) {
				cfg.Policies[i] = d.cfg.Policies[j]
				kept++
				break
			}
		}
	}
	engine := &policy.Engine{Policies: append([]policy.Policy(nil), cfg.Policies...)}
	d.hintOwned = false
	if d.hint != nil {
		d.applyHint(engine, d.hint)
	}
	ivChanged := cfg.Interval != d.cfg.Interval
	d.cfg, d.engine = cfg, engine
	d.scope.setMptcpize(cfg.Mptcpize, prepared)
	d.syncRequirements()
	d.in.mark(func(in *inbox) { in.all = true }) // the policies may have changed: decide everything
	if ivChanged {
		d.in.intervalChanged()
	}
	var names []string
	for _, p := range engine.Policies {
		names = append(names, p.Name())
	}
	msg := fmt.Sprintf("applied %s: policies [%s] (%d kept with their state), %d chain(s)", file, strings.Join(names, ", "), kept, len(d.chains))
	for _, w := range warnings {
		msg += "; warning: " + w
	}
	return msg, nil
}

// errStopping: the loop has stopped; nothing more is changed.
var errStopping = errors.New("the daemon is stopping: it changes nothing more")

// reloadConfig reloads the file the daemon runs now (--config, or the
// last one `policy apply` sent): what SIGHUP and a change of the file both
// do. A config that is wrong is refused and logged; the old one stays.
func (d *Daemon) reloadConfig(trigger string) {
	d.mu.Lock()
	file := d.cfg.File
	d.mu.Unlock()
	d.ops.reloading()
	msg, err := d.reload(file, nil)
	if err != nil {
		d.log.Printf("%s: config not applied, the old one stays: %v", trigger, err)
	} else {
		d.log.Printf("%s: %s", trigger, msg)
	}
	d.ops.reloaded(trigger, msg, err)
}

// applyHint gives the user's hint to the prefer policy, adding one (first,
// so the user's word wins) when the config has none.
func (d *Daemon) applyHint(engine *policy.Engine, targets []string) error {
	p, _ := engine.Get("prefer").(*policy.Prefer)
	if p == nil {
		p = policy.NewPrefer(hostEnv())
		engine.Policies = append([]policy.Policy{p}, engine.Policies...)
		d.hintOwned = true
	}
	return p.SetTargets(targets)
}

// setHint sets or clears the user's preference (`mpsteer prefer`).
func (d *Daemon) setHint(targets []string, clear bool) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loop.stopped {
		return "", errStopping
	}
	if clear {
		d.hint = nil
		msg := "preference cleared: the kernel's default behaviour applies"
		if p, _ := d.engine.Get("prefer").(*policy.Prefer); p != nil {
			if d.hintOwned {
				var keep []policy.Policy
				for _, q := range d.engine.Policies {
					if q != policy.Policy(p) {
						keep = append(keep, q)
					}
				}
				d.engine.Policies, d.hintOwned = keep, false
			} else {
				// The config's own prefer policy goes back to its paths.
				p.ResetTargets()
				if t := p.Targets(); len(t) > 0 {
					msg = "preference cleared: back to the config's paths " + strings.Join(t, ", then ")
				}
			}
		}
		d.syncRequirements()
		d.in.mark(func(in *inbox) { in.all = true })
		return msg, nil
	}
	if len(targets) == 0 {
		return "", errors.New("name at least one interface or address to prefer")
	}
	for _, t := range targets {
		if _, err := netip.ParseAddr(t); err != nil {
			if _, ok := InterfaceAddrs(t); !ok {
				return "", fmt.Errorf("%q is neither an address nor an interface of namespace %s", t, d.netns)
			}
		}
	}
	if err := d.applyHint(d.engine, targets); err != nil {
		return "", err
	}
	d.hint = append([]string(nil), targets...)
	d.syncRequirements()
	d.in.mark(func(in *inbox) { in.all = true })
	return "preferring " + strings.Join(targets, ", then "), nil
}
