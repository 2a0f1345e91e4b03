package daemon

import (
	"fmt"
	"mpsteer/internal/config"
	"time"

	"mpsteer/internal/datapath/spread"
	"mpsteer/internal/policy"
)

// spreadState is the spread policy's datapath as installed: the policy
// whose config it carries, the programs, rules and routes, and the loop
// that follows the uplinks' state.
type spreadState struct {
	pol  *policy.Spread
	dp   *spread.Spread
	stop chan struct{}
	done chan struct{}
}

// spreadPolicy finds the config's spread policy (at most one: policies
// are listed once) and its canonical entry.
func spreadPolicy(cfg *config.Config) (*policy.Spread, string) {
	for i, p := range cfg.Policies {
		if s, ok := p.(*policy.Spread); ok {
			key := ""
			if i < len(cfg.PolicyKeys) {
				key = cfg.PolicyKeys[i]
			}
			return s, key
		}
	}
	return nil, ""
}

// reconcileSpread makes the installed spread datapath that of cfg's spread
// policy, all or nothing. An unchanged entry keeps its datapath (and its
// counters); a changed one replaces it (the old one comes off first: both
// would use the same marks and tables); none removes it. On error the
// previous datapath is back in place and the error names the policy's
// entry (file:line). rollback undoes what the call did, for a reload that
// fails later (its chains).
func (d *Daemon) reconcileSpread(cfg *config.Config) (rollback func(), err error) {
	noop := func() {}
	want, wantKey := spreadPolicy(cfg)
	var old *policy.Spread
	oldKey := ""
	if d.cfg != nil && d.cfg != cfg {
		old, oldKey = spreadPolicy(d.cfg)
	}
	if want == nil && d.spread == nil {
		return noop, nil
	}
	if want != nil && d.spread != nil && old != nil && wantKey == oldKey {
		// The same entry: the reload keeps the running policy (and with
		// it this datapath).
		return noop, nil
	}
	prev := d.spread
	if prev != nil {
		d.closeSpread()
	}
	restore := func() {
		if prev == nil {
			return
		}
		if err := d.installSpread(prev.pol); err != nil {
			d.log.Printf("spread: the previous datapath could not be put back: %v", err)
		}
	}
	if want == nil {
		d.log.Printf("spread: datapath removed (no spread policy in the config)")
		return restore, nil
	}
	if err := d.installSpread(want); err != nil {
		restore()
		return nil, err
	}
	return func() { d.closeSpread(); restore() }, nil
}

// installSpread installs the datapath for p and starts following the
// uplinks.
func (d *Daemon) installSpread(p *policy.Spread) error {
	cfg := spread.Config{From: p.From, MarkBase: p.MarkBase, TableBase: p.TableBase, Priority: p.Priority}
	for _, u := range p.Via {
		cfg.Uplinks = append(cfg.Uplinks, spread.Uplink{Dev: u.Dev, Gateway: u.Gateway})
	}
	dp, err := spread.Install(cfg)
	if err != nil {
		return fmt.Errorf("%s: %w", p.Where, err)
	}
	for _, w := range dp.Warnings {
		d.log.Printf("spread: warning: %s", w)
	}
	st := &spreadState{pol: p, dp: dp, stop: make(chan struct{}), done: make(chan struct{})}
	p.SetDatapath(func() any { return dp.Stats() })
	d.spread = st
	d.log.Printf("spread: %s (marks %#x…, tables %d…, rule priority %d)", p, p.MarkBase, p.TableBase, p.Priority)
	go func() {
		defer close(st.done)
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-st.stop:
				return
			case <-t.C:
				for _, msg := range dp.Sync() {
					d.log.Printf("spread: %s", msg)
				}
			}
		}
	}()
	return nil
}

// closeSpread removes the datapath (programs, rules, routes), if any.
func (d *Daemon) closeSpread() {
	st := d.spread
	if st == nil {
		return
	}
	d.spread = nil
	close(st.stop)
	<-st.done
	st.pol.SetDatapath(nil)
	if err := st.dp.Close(); err != nil {
		d.log.Printf("spread: removing the datapath: %v", err)
	}
}
