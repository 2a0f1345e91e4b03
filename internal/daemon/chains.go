package daemon

import (
	"fmt"

	"mpsteer/internal/config"
	"mpsteer/internal/datapath"
)

// configChain is a chain the config declared, as attached.
type configChain struct {
	spec datapath.ChainSpec // as declared (ID 0: the manager picked id)
	id   uint32
}

// sameChain: two declarations of one chain.
func sameChain(a, b datapath.ChainSpec) bool {
	return a.Dev == b.Dev && a.Hook == b.Hook && a.Select == b.Select && a.Act == b.Act && a.ID == b.ID
}

// reconcileChains makes the attached config chains those of cfg, all or
// nothing: a chain whose declaration did not change is left alone (its
// counters and withheld options stay); a chain with a declared id whose
// expressions changed is replaced in place (atomically, state kept); the
// rest are added, then the ones no longer declared are removed. If any
// add or replace fails, what this call did is undone and the error names
// the entry (file, line). A chain that cannot be removed stays tracked
// and is retried on the next reload; it is reported in warnings.
func (d *Daemon) reconcileChains(cfg *config.Config) (warnings []string, err error) {
	if len(cfg.Chains) == 0 && len(d.chains) == 0 {
		return nil, nil
	}
	m, err := d.manager()
	if err != nil {
		return nil, err
	}
	cur := d.chains
	keep := make([]int, len(cfg.Chains)) // index into cur, or -1
	used := make([]bool, len(cur))
	last := map[string]int{} // per dev/hook: the last kept index into cur
	for i, e := range cfg.Chains {
		keep[i] = -1
		hook := e.Spec.Dev + "/" + string(e.Spec.Hook)
		for j, c := range cur {
			if used[j] || !sameChain(c.spec, e.Spec) {
				continue
			}
			if l, ok := last[hook]; ok && j < l {
				break // reordered: re-add it in its new place
			}
			keep[i], used[j], last[hook] = j, true, j
			break
		}
	}
	// A chain declared with the id of an attached one on the same hook,
	// with new expressions: replaced in place.
	replace := map[int]int{} // cfg index → cur index
	for i, e := range cfg.Chains {
		if keep[i] >= 0 || e.Spec.ID == 0 {
			continue
		}
		for j, c := range cur {
			if !used[j] && c.id == e.Spec.ID && c.spec.Dev == e.Spec.Dev && c.spec.Hook == e.Spec.Hook {
				replace[i], used[j] = j, true
				break
			}
		}
	}
	ids := make([]uint32, len(cfg.Chains))
	var added []uint32
	type undo struct {
		id       uint32
		sel, act string
	}
	var replaced []undo
	rollback := func() {
		for _, u := range replaced {
			if _, err := m.Replace(u.id, u.sel, u.act); err != nil {
				d.log.Printf("chain %d: restoring its previous expressions failed: %v", u.id, err)
			}
		}
		for _, id := range added {
			if err := m.Del(id); err != nil {
				d.log.Printf("chain %d: removing it again failed: %v", id, err)
			}
		}
	}
	for i := range cfg.Chains {
		if j, ok := replace[i]; ok {
			ids[i] = cur[j].id
		} else if keep[i] >= 0 {
			ids[i] = cur[keep[i]].id
		}
	}
	// New chains, last first, each placed before the next chain of its
	// hook so that the config's order is the packets' order.
	for i := len(cfg.Chains) - 1; i >= 0; i-- {
		if ids[i] != 0 {
			continue
		}
		e := cfg.Chains[i]
		spec := e.Spec
		for k := i + 1; k < len(cfg.Chains); k++ {
			if o := cfg.Chains[k].Spec; o.Dev == spec.Dev && o.Hook == spec.Hook && ids[k] != 0 {
				spec.Before = ids[k]
				break
			}
		}
		st, err := m.Add(spec)
		if err != nil {
			rollback()
			return nil, fmt.Errorf("%s (%s %s): %w", e.Where, spec.Dev, spec.Hook, err)
		}
		ids[i] = st.ID
		added = append(added, st.ID)
		d.log.Printf("chain %d on %s %s: select %q act %q", st.ID, spec.Dev, spec.Hook, spec.Select, spec.Act)
	}
	for i, j := range replace {
		e, old := cfg.Chains[i], cur[j]
		if _, err := m.Replace(old.id, e.Spec.Select, e.Spec.Act); err != nil {
			rollback()
			return nil, fmt.Errorf("%s (chain %d): %w", e.Where, old.id, err)
		}
		replaced = append(replaced, undo{old.id, old.spec.Select, old.spec.Act})
		d.log.Printf("chain %d replaced: select %q act %q", old.id, e.Spec.Select, e.Spec.Act)
	}
	next := make([]configChain, 0, len(cfg.Chains))
	for i, e := range cfg.Chains {
		next = append(next, configChain{spec: e.Spec, id: ids[i]})
	}
	for j, c := range cur {
		if used[j] {
			continue
		}
		if err := m.Del(c.id); err != nil {
			// Still attached: keep it tracked so that the next reload (or
			// the exit) tries again.
			warnings = append(warnings, fmt.Sprintf("chain %d (no longer in the config) could not be removed: %v", c.id, err))
			next = append(next, configChain{spec: datapath.ChainSpec{Dev: "(removed from the config)"}, id: c.id})
			continue
		}
		d.log.Printf("chain %d removed (no longer in the config)", c.id)
	}
	d.chains = next
	return warnings, nil
}
