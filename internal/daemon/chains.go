package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"mpsteer/internal/datapath"
	"mpsteer/internal/yamlcfg"
)

// ChainConfig is a chain declared in the daemon's config.
type ChainConfig = datapath.ChainSpec

func init() {
	extraHandlers = append(extraHandlers, chainHandlers)
}

// parseChain reads one chains: entry; expressions are compiled here so a
// bad one is refused with its file, line and key.
func parseChain(m *yamlcfg.Map) ChainConfig {
	c := ChainConfig{
		ID:     uint32(m.Int("id", 0, 0, datapath.MaxChains-1)),
		Dev:    m.String("dev", ""),
		Hook:   datapath.Hook(m.Enum("hook", "", "ingress", "egress")),
		Select: m.String("select", ""),
		Act:    m.String("act", ""),
	}
	if c.Dev == "" {
		m.Errorf("dev", "a chain needs a device (dev: eth0)")
	}
	if c.Hook == "" {
		m.Errorf("hook", "a chain needs a hook (valid: ingress, egress)")
	}
	if _, err := datapath.Compile(c.Select, c.Act, nil); err != nil {
		var ee *datapath.ExprError
		key := "act"
		if errors.As(err, &ee) && ee.What == "select" {
			key = "select"
		}
		m.Errorf(key, "%v", err)
	}
	return c
}

// manager returns the datapath manager, loading it on first use.
func (d *Daemon) manager() (*datapath.Manager, error) {
	if d.dp != nil {
		return d.dp, nil
	}
	// Persist is read once: the maps are chosen when they are loaded.
	m, err := datapath.NewManagerWith(datapath.Options{PinDir: d.cfg.Persist})
	if err != nil {
		return nil, err
	}
	d.dp = m
	return m, nil
}

// configChain is a chain the config declared, as attached.
type configChain struct {
	spec ChainConfig // as declared (ID 0: the manager picked id)
	id   uint32
}

// sameChain: two declarations of one chain.
func sameChain(a, b ChainConfig) bool {
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
func (d *Daemon) reconcileChains(cfg *Config) (warnings []string, err error) {
	if len(cfg.Chains) == 0 && len(d.configChains) == 0 {
		return nil, nil
	}
	m, err := d.manager()
	if err != nil {
		return nil, err
	}
	cur := d.configChains
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
			next = append(next, configChain{spec: ChainConfig{Dev: "(removed from the config)"}, id: c.id})
			continue
		}
		d.log.Printf("chain %d removed (no longer in the config)", c.id)
	}
	d.configChains = next
	return warnings, nil
}

func chainHandlers(d *Daemon, mux *http.ServeMux) {
	withManager := func(w http.ResponseWriter, fn func(m *datapath.Manager) (any, error)) {
		d.mu.Lock()
		m, err := d.manager()
		d.mu.Unlock()
		if err != nil {
			writeErr(w, err)
			return
		}
		v, err := fn(m)
		if err != nil {
			writeErr(w, err)
			return
		}
		writeJSON(w, http.StatusOK, v)
	}
	id := func(r *http.Request) (uint32, error) {
		n, err := strconv.ParseUint(r.PathValue("id"), 10, 32)
		if err != nil {
			return 0, fmt.Errorf("chain id %q is not a number", r.PathValue("id"))
		}
		return uint32(n), nil
	}
	mux.HandleFunc("GET /v1/chains", func(w http.ResponseWriter, r *http.Request) {
		withManager(w, func(m *datapath.Manager) (any, error) { return m.List(), nil })
	})
	mux.HandleFunc("POST /v1/chains", func(w http.ResponseWriter, r *http.Request) {
		var spec datapath.ChainSpec
		if err := decode(r, &spec); err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			st, err := m.Add(spec)
			if err == nil {
				d.log.Printf("chain %d added on %s %s: select %q act %q", st.ID, spec.Dev, spec.Hook, spec.Select, spec.Act)
			}
			return st, err
		})
	})
	mux.HandleFunc("DELETE /v1/chains/{id}", func(w http.ResponseWriter, r *http.Request) {
		n, err := id(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			return map[string]any{"deleted": n}, m.Del(n)
		})
	})
	mux.HandleFunc("POST /v1/chains/{id}/{op}", func(w http.ResponseWriter, r *http.Request) {
		n, err := id(r)
		if err != nil {
			writeErr(w, err)
			return
		}
		var req struct {
			Select string `json:"select"`
			Act    string `json:"act"`
			Before uint32 `json:"before"`
			After  uint32 `json:"after"`
		}
		if r.ContentLength > 0 {
			if err := decode(r, &req); err != nil {
				writeErr(w, err)
				return
			}
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			switch r.PathValue("op") {
			case "release":
				k, err := m.Release(n)
				return map[string]any{"released": k}, err
			case "replace":
				return m.Replace(n, req.Select, req.Act)
			case "move":
				return m.Move(n, req.Before, req.After)
			}
			return nil, fmt.Errorf("unknown chain operation %q (valid: release, replace, move)", r.PathValue("op"))
		})
	})
	mux.HandleFunc("POST /v1/actors", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			File string `json:"file"`
			Name string `json:"name"`
		}
		if err := decode(r, &req); err != nil {
			writeErr(w, err)
			return
		}
		withManager(w, func(m *datapath.Manager) (any, error) {
			if err := m.LoadActor(req.File, req.Name); err != nil {
				return nil, err
			}
			d.log.Printf("actor %s loaded from %s", req.Name, req.File)
			return map[string]any{"loaded": req.Name}, nil
		})
	})
}

func (d *Daemon) chainStatus() json.RawMessage {
	if d.dp == nil {
		return nil
	}
	b, _ := json.Marshal(d.dp.List())
	return b
}
