package scenario

import (
	"fmt"
	"slices"
	"strings"

	"mpsteer/internal/yamlcfg"
)

// A competitor is single-path TCP beside the measured connection, to see
// what the measured connection takes from it (coupled congestion
// control's "do no harm"):
//
//	traffic:
//	  - {type: bulk, duration: 20s}                               # measured: MPTCP or TCP, as the variant says
//	  - {type: bulk, duration: 20s, competitor: true, path: a}    # always plain TCP, over path a
//
// It is a bulk transfer that connects from the path's client address to
// its server address (default the first path), so it crosses that path
// (and the core, for a via-core path). Its goodput is measured apart
// (summary.json's competitor_goodput_mbit, the sum of every competitor's
// streams, and competitor_flows), and its sockets are left out of the
// measured connection's subflows and per-path shares. Every variant must
// build the competitor's path (a tcp-best with path: best builds one
// candidate at a time and cannot have competitors).

// parseCompetitor reads competitor and its path on a bulk entry (after
// the bulk keys).
func parseCompetitor(t *yamlcfg.Map, tr *Traffic, paths map[string]bool, tn *Tenants) {
	if !t.Has("competitor") {
		return
	}
	tr.Competitor = t.Bool("competitor", false)
	if t.Failed("competitor") || !tr.Competitor {
		return
	}
	if tn != nil {
		t.Errorf("competitor", "a tenants world's background is other VM pairs' traffic (pair: [vm3, vm4]); competitor is for worlds with paths")
		return
	}
	tr.Path = t.String("path", "")
	switch {
	case t.Failed("path"):
	case tr.Path == "":
	case !paths[tr.Path]:
		t.Errorf("path", "%q is not a path of this scenario", tr.Path)
	}
	if t.Has("direction") {
		t.Errorf("direction", "a competitor sends the way the measured traffic does; leave direction out")
	}
}

// checkCompetitors: every variant builds the competitors' paths, and
// competitors send the way the measured traffic does. Runs after the
// variants' paths are filled in.
func checkCompetitors(m *yamlcfg.Map, s *Scenario) {
	upload, measured := true, false
	for _, t := range s.Traffic {
		if t.Kind != UDPFlood && !t.Competitor && t.Measured(s) {
			upload, measured = t.Upload, true
			break
		}
	}
	for i := range s.Traffic {
		t := &s.Traffic[i]
		if !t.Competitor {
			continue
		}
		if t.Path == "" && len(s.Paths) > 0 {
			t.Path = s.Paths[0].Name
		}
		t.Upload = upload
		if !measured {
			m.Errorf("traffic", "traffic at line %d is a competitor, but there is no measured traffic for it to compete with", t.Line)
		}
		if s.Path(t.Path) == nil {
			continue // said already
		}
		for _, v := range s.Variants {
			name := "variant " + v.Name
			if v.Line > 0 {
				name += fmt.Sprintf(" (line %d)", v.Line)
			}
			switch {
			case len(v.BestOf) > 0:
				m.Errorf("variants", "%s measures TCP over each of %s in turn, one path per world: a competitor on %s would not always exist; name tcp-best's path", name, strings.Join(v.BestOf, ", "), t.Path)
			case !slices.Contains(v.Paths, t.Path):
				m.Errorf("variants", "%s does not build path %s, which the competitor at line %d crosses (its paths: %s)", name, t.Path, t.Line, strings.Join(v.Paths, ", "))
			}
		}
	}
}
