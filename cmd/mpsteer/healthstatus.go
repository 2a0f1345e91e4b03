package main

import (
	"fmt"
	"sort"
	"strings"

	"mpsteer/internal/api"
)

// printSubflowHealth prints a subflow's path-health report (RAMPTCP).
func printSubflowHealth(r *api.PathReport) {
	if r == nil {
		return
	}
	val := func(p *float64) string {
		if p == nil {
			return "?"
		}
		return fmt.Sprintf("%.1f%%", *p)
	}
	switch r.Direction {
	case "received":
		fmt.Printf("      peer's report: loss %s, last hop %s, at %s (%.0f ms ago, %d reports, came on %s)\n",
			val(r.LossPct), val(r.LastHopPct), r.At.Format("15:04:05.000"), r.AgeMs, r.Reports, r.Via)
	default:
		fmt.Printf("      reports its last hop %s: %s (%s)\n", r.Iface, val(r.LastHopPct), r.Detail)
	}
}

// printHealthStatus prints the path-health program's state.
func printHealthStatus(h *api.HealthStatus) {
	if h == nil {
		return
	}
	var roles []string
	if h.Report {
		roles = append(roles, "reports ("+h.Source+")")
	}
	if h.Parse {
		roles = append(roles, "reads the peer's reports")
	}
	fmt.Printf("path health: %s", strings.Join(roles, ", "))
	if h.FitPct != nil {
		fmt.Printf("; the report fitted on %.1f%% of the ACKs with something to report", *h.FitPct)
	}
	fmt.Println()
	if h.Error != "" {
		fmt.Printf("  program: %s\n", h.Error)
	}
	if h.SourceError != "" {
		fmt.Printf("  last-hop source: %s\n", h.SourceError)
	}
	var keys []string
	for k, v := range h.Program {
		if v > 0 {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %d", k, h.Program[k]))
	}
	if len(parts) > 0 {
		fmt.Printf("  counters: %s\n", strings.Join(parts, ", "))
	}
}
