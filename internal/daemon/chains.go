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
	ChainHook = checkChain
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

func checkChain(m *yamlcfg.Map) { parseChain(m) }

// chainSpecs turns the config's chain entries into specs.
func (c *Config) chainSpecs() []ChainConfig {
	var out []ChainConfig
	for _, m := range c.Chains {
		out = append(out, parseChain(m))
	}
	return out
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

// applyConfigChains replaces the chains the config owns with those of cfg;
// on any error the chains added so far are removed again, and the error
// says which entry failed.
func (d *Daemon) applyConfigChains(cfg *Config) error {
	specs := cfg.chainSpecs()
	if len(specs) == 0 && len(d.configChains) == 0 {
		return nil
	}
	m, err := d.manager()
	if err != nil {
		return err
	}
	for _, id := range d.configChains {
		m.Del(id)
	}
	d.configChains = nil
	var added []uint32
	for i, s := range specs {
		st, err := m.Add(s)
		if err != nil {
			for _, id := range added {
				m.Del(id)
			}
			return fmt.Errorf("%s: chains[%d] (%s %s): %w", cfg.File, i, s.Dev, s.Hook, err)
		}
		added = append(added, st.ID)
		d.log.Printf("chain %d on %s %s: select %q act %q", st.ID, s.Dev, s.Hook, s.Select, s.Act)
	}
	d.configChains = added
	return nil
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
