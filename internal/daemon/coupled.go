package daemon

import (
	"maps"
	"slices"
	"strings"

	"mpsteer/internal/policy"
	"mpsteer/internal/sockops/coupled"
)

// couplers are the coupled congestion controls the policies require, one
// per algorithm in use (each attached to the cgroups of its scopes), and
// why one could not be loaded (said once).
type couplers struct {
	on  map[coupled.Algorithm]*coupled.Coupler
	err map[coupled.Algorithm]string
	// attachErr is the last error attaching each algorithm's selector (a
	// scope's cgroup that does not exist yet): tried again every sync,
	// said when it changes.
	attachErr map[coupled.Algorithm]string
}

// coupledScopes turns the requirements into the cgroups each algorithm's
// selector attaches to ("/" for every connection): for one cgroup the
// first entry counts.
func coupledScopes(req []policy.CoupledScope) map[coupled.Algorithm][]string {
	out := map[coupled.Algorithm][]string{}
	taken := map[string]bool{}
	for _, s := range req {
		cg := s.Cgroup
		if cg == "" {
			cg = "/"
		}
		if taken[cg] {
			continue
		}
		taken[cg] = true
		alg := coupled.Algorithm(s.Algorithm)
		out[alg] = append(out[alg], cg)
	}
	for _, v := range out {
		slices.Sort(v)
	}
	return out
}

// syncCoupled keeps the coupled congestion controls in line with the
// policies (under mu): an algorithm is loaded on first need and attached
// to its scopes' cgroups, moved when they change, unloaded when no
// policy wants it. Subflows established before keep what they run; those
// still on an unloaded algorithm keep it until they close.
func (d *Daemon) syncCoupled(req policy.Requirements) {
	c := &d.progs.coupled
	want := coupledScopes(req.Coupled)
	for alg, cp := range c.on {
		if len(want[alg]) > 0 {
			continue
		}
		if err := cp.Close(); err != nil {
			d.log.Printf("coupled %s: unload: %v", alg, err)
		}
		delete(c.on, alg)
		delete(c.attachErr, alg)
		d.log.Printf("coupled %s: off (MPTCP subflows established from now on run the host's default congestion control)", alg)
	}
	for _, alg := range slices.Sorted(maps.Keys(want)) {
		scopes := want[alg]
		cp := c.on[alg]
		if cp == nil {
			if c.err[alg] != "" {
				continue // tried and failed; said so once
			}
			var err error
			if cp, err = coupled.New(alg, d.cookie); err != nil {
				if c.err == nil {
					c.err = map[coupled.Algorithm]string{}
				}
				c.err[alg] = err.Error()
				d.log.Printf("coupled %s is not in place: %v", alg, err)
				continue
			}
			if c.on == nil {
				c.on = map[coupled.Algorithm]*coupled.Coupler{}
			}
			c.on[alg] = cp
		}
		if slices.Equal(cp.Scopes(), scopes) {
			continue
		}
		before := cp.Scopes()
		msg := ""
		if err := cp.Attach(scopes); err != nil {
			msg = err.Error()
		}
		if msg != c.attachErr[alg] {
			if msg != "" {
				d.log.Printf("coupled %s: %s", alg, msg)
			}
			if c.attachErr == nil {
				c.attachErr = map[coupled.Algorithm]string{}
			}
			c.attachErr[alg] = msg
		}
		if after := cp.Scopes(); !slices.Equal(before, after) {
			d.log.Printf("coupled %s: MPTCP subflows of new connections in %s run %s", alg, strings.Join(after, ", "), cp.CongestionControl())
		}
	}
}

func (c *couplers) close() {
	for alg, cp := range c.on {
		cp.Close()
		delete(c.on, alg)
	}
}

// status is each algorithm's congestion control, scopes and counters.
func (c *couplers) status() map[string]any {
	if len(c.on) == 0 && len(c.err) == 0 {
		return nil
	}
	out := map[string]any{}
	for alg, cp := range c.on {
		m := map[string]any{"congestion_control": cp.CongestionControl(), "cgroups": cp.Scopes(), "counters": cp.Stats()}
		if e := c.attachErr[alg]; e != "" {
			m["attach_error"] = e
		}
		out[string(alg)] = m
	}
	for alg, e := range c.err {
		out[string(alg)] = map[string]any{"error": e}
	}
	return out
}
