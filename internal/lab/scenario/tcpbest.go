package scenario

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/yamlcfg"
)

// The strongest single-path baseline: what a user without MPTCP would
// pick is TCP over the best of the paths. A variant named TCPBest claims
// to be that, so the claim is checked:
//
//	{name: tcp-best, kind: tcp, path: NAME}
//
// is accepted only when NAME is at least as good as every other path
// (among, default all): a rate at least as high and a one-way delay and
// jitter no larger in both directions, counting the core links it may
// cross; no loss, no outages, no trace, and no event or UDP flood touching
// it. Where no path is, or the best one is not known beforehand,
//
//	{name: tcp-best, kind: tcp, path: best}
//
// measures TCP over each candidate path in turn in every run (a fresh
// world each) and keeps the best by the scenario's primary metric (the
// run's summary says which: best_path). In a tenants world the measured
// VM pair has one route, which the hypervisors choose, so tcp-best is TCP
// between the pair and takes no path.

// TCPBest is the name of the variant that claims the best single path.
const TCPBest = "tcp-best"

// BestPath, as a tcp variant's path, asks for TCP over each candidate
// path in turn, keeping the best.
const BestPath = "best"

// parseTCPBest reads a tcp variant's among and checks a tcp-best claim.
// It runs from parseVariant after the variant's path, paths and events
// are read.
func parseTCPBest(vm *yamlcfg.Map, v *Variant, ec *eventContext) {
	hasAmong := vm.Has("among")
	var among []string
	if hasAmong {
		among = vm.Strings("among")
		for _, p := range among {
			if !ec.paths[p] {
				vm.Errorf("among", "%q is not a path of this scenario", p)
			}
		}
		if len(among) == 0 && !vm.Failed("among") {
			vm.Errorf("among", "name the candidate paths, e.g. among: [wifi, cell]")
		}
	}
	path := ""
	if len(v.Paths) == 1 {
		path = v.Paths[0]
	}
	if ec.tenants != nil {
		if v.Name == TCPBest && v.Kind != KindTCP {
			vm.Errorf("kind", "tcp-best is single-path TCP: it needs kind: tcp")
		}
		if hasAmong {
			vm.Errorf("among", "a tenants world has no paths to choose from: the hypervisors route the measured pair")
		}
		return
	}
	if v.Name == TCPBest {
		switch {
		case v.Kind != KindTCP:
			vm.Errorf("kind", "tcp-best is single-path TCP over the best path: it needs kind: tcp")
			return
		case path == "" && !vm.Failed("path") && !vm.Failed("paths"):
			vm.Errorf("path", "tcp-best needs its path: path: NAME (a path at least as good as every other one) or path: best (TCP over each path in every run, the best kept)")
			return
		}
	}
	if hasAmong && path == "" {
		vm.Errorf("among", "among lists the candidates of path: best or of path: NAME's claim; give path")
		return
	}
	if path == "" || vm.Failed("path") || vm.Failed("among") || (v.Kind != KindTCP && !hasAmong) {
		if v.Kind != KindTCP && hasAmong {
			vm.Errorf("among", "among is for a tcp variant's path (kind: tcp)")
		}
		return
	}
	candidates := among
	if !hasAmong {
		for _, p := range ec.s.Paths {
			candidates = append(candidates, p.Name)
		}
	}
	if path == BestPath {
		if ec.paths[BestPath] {
			vm.Errorf("path", "a path of this scenario is named %q, so path: %s is ambiguous; rename that path", BestPath, BestPath)
			return
		}
		if len(candidates) == 0 {
			// No path to choose from: the scenario's paths are missing,
			// which parse reports at paths.
			return
		}
		v.BestOf = candidates
		// What builds one world (lab up) gets the first candidate.
		v.Paths = []string{candidates[0]}
		return
	}
	if v.Name != TCPBest && !hasAmong {
		return // an ordinary tcp variant claims nothing
	}
	if !slices.Contains(candidates, path) {
		vm.Errorf("path", "%q is not among the candidates (among: %s)", path, strings.Join(candidates, ", "))
		return
	}
	for _, other := range candidates {
		if other == path {
			continue
		}
		if why := dominates(ec, v, path, other); why != "" {
			vm.Errorf("path", "%s is not at least as good as %s: %s; name a path that is, or write path: best (TCP over each path in every run, the best kept)", path, other, why)
			return
		}
	}
}

// linkView is what a direction of a path offers, access link and core
// links together: its rate (+Inf: unlimited), delay and jitter.
type linkView struct {
	rate          float64
	delay, jitter time.Duration
}

func rateOf(p linkemu.Params) float64 {
	if p.Rate <= 0 {
		return math.Inf(1)
	}
	return float64(p.Rate)
}

// coreLinksOf are the core links a tcp variant's connection over path may
// cross: any of a shared core's, or its own address pair's.
func coreLinksOf(c *Core, path string) []CoreLink {
	if c == nil {
		return nil
	}
	if c.LinksPerPair == 0 {
		return c.Links
	}
	var out []CoreLink
	for _, l := range c.Links {
		if l.Client == path && l.Server == path {
			out = append(out, l)
		}
	}
	return out
}

// dominates says why path a is not at least as good as path b for a
// tcp variant v ("" when it is).
func dominates(ec *eventContext, v *Variant, a, b string) string {
	pa, pb := ec.s.Path(a), ec.s.Path(b)
	if pa == nil || pb == nil {
		return "" // reported elsewhere
	}
	if why := unsteady(ec, v, pa); why != "" {
		return why
	}
	if pb.Up.Trace != nil || pb.Down.Trace != nil {
		return fmt.Sprintf("%s's rate follows a trace, which a fixed rate cannot be compared with", b)
	}
	for _, dir := range []string{"up", "down"} {
		worst, best := view(ec, pa, dir, true), view(ec, pb, dir, false)
		switch {
		case worst.rate < best.rate:
			return fmt.Sprintf("%s %s has a lower rate (%s against %s)", dir, a, rateString(worst.rate), rateString(best.rate))
		case worst.delay > best.delay:
			return fmt.Sprintf("%s %s has a longer one-way delay (%v against %v)", dir, a, worst.delay, best.delay)
		case worst.jitter > best.jitter:
			return fmt.Sprintf("%s %s has more jitter (%v against %v)", dir, a, worst.jitter, best.jitter)
		}
	}
	return ""
}

func rateString(r float64) string {
	if math.IsInf(r, 1) {
		return "unlimited"
	}
	return fmt.Sprintf("%g Mbit/s", r/1e6)
}

// unsteady says what makes a path's quality not fixed for the variant:
// loss, outages, a trace, events and floods on it or on core links it
// may cross.
func unsteady(ec *eventContext, v *Variant, p *Path) string {
	params := []linkemu.Params{p.Up, p.Down}
	core := map[string]bool{}
	if p.ViaCore {
		for _, l := range coreLinksOf(ec.s.Core, p.Name) {
			params = append(params, l.Up, l.Down)
			core[l.Name] = true
		}
	}
	for _, x := range params {
		switch {
		case x.Loss > 0:
			return fmt.Sprintf("it loses packets (%s)", x.Loss)
		case len(x.Outages) > 0:
			return "it has outages"
		case x.Trace != nil:
			return "its rate follows a trace"
		}
	}
	for _, ev := range append(slices.Clone(ec.s.Events), v.Events...) {
		if ev.Path == p.Name {
			return fmt.Sprintf("the event at %v (line %d) changes it", ev.At, ev.Line)
		}
		for _, l := range ev.Links {
			if core[l] {
				return fmt.Sprintf("the event at %v (line %d) changes core link %s, which it may cross", ev.At, ev.Line, l)
			}
		}
	}
	for _, t := range ec.s.Traffic {
		if t.Kind == UDPFlood && t.Path == p.Name {
			return fmt.Sprintf("the UDP flood of line %d runs on it", t.Line)
		}
	}
	return ""
}

// view is a direction of a path with the core links it may cross: the
// worst of them (for the path that claims to be best) or the best.
func view(ec *eventContext, p *Path, dir string, worst bool) linkView {
	access := p.Up
	if dir == "down" {
		access = p.Down
	}
	out := linkView{rate: rateOf(access), delay: access.Delay, jitter: access.Jitter}
	if !p.ViaCore {
		return out
	}
	links := coreLinksOf(ec.s.Core, p.Name)
	if len(links) == 0 {
		return out
	}
	var rate float64
	var delay, jitter time.Duration
	for i, l := range links {
		x := l.Up
		if dir == "down" {
			x = l.Down
		}
		r := rateOf(x)
		if i == 0 {
			rate, delay, jitter = r, x.Delay, x.Jitter
			continue
		}
		if worst {
			rate, delay, jitter = min(rate, r), max(delay, x.Delay), max(jitter, x.Jitter)
		} else {
			rate, delay, jitter = max(rate, r), min(delay, x.Delay), min(jitter, x.Jitter)
		}
	}
	out.rate = min(out.rate, rate)
	out.delay += delay
	out.jitter += jitter
	return out
}
