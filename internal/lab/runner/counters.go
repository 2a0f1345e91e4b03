package runner

import (
	"fmt"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/observe"
)

// readCounters reads the MPTCP MIB counters of the client's and the
// server's namespace, by role; a namespace that cannot be read is left
// out (and said in the run's progress).
func (r *variantRun) readCounters() map[string]observe.MPTCPCounters {
	out := map[string]observe.MPTCPCounters{}
	plan := &r.w.Plan
	for role, ns := range map[string]string{"client": plan.Host(plan.ClientRole()).NetNS, "server": plan.Host(plan.ServerRole()).NetNS} {
		c, err := observe.ReadMPTCPCounters(ns)
		if err != nil {
			fmt.Fprintf(r.o.Progress, "      %s: the %s's MPTCP counters: %v\n", r.v.Name, role, err)
			continue
		}
		out[role] = c
	}
	return out
}

// countersSince puts how the counters moved since before into the
// summary, and says so in the progress when the kernel reset subflows for
// data mappings it could not match (report.Summary.KernelResets).
func (r *variantRun) countersSince(sum *report.Summary, before map[string]observe.MPTCPCounters) {
	after := r.readCounters()
	sum.MPTCPCounters = map[string]observe.MPTCPCounters{}
	for role, c := range after {
		if b, ok := before[role]; ok {
			if d := c.Since(b); len(d) > 0 {
				sum.MPTCPCounters[role] = d
			}
		}
	}
	if n := sum.KernelResets(); n > 0 {
		fmt.Fprintf(r.o.Progress, "      %s: the kernel reset %d subflow(s) for a data mapping it could not match (MPTcpExtDSSNotMatching; mptcp_counters in summary.json)\n", r.v.Name, n)
	}
}
