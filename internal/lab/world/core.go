package world

import (
	"errors"
	"fmt"
	"strings"

	"mpsteer/internal/lab/scenario"
)

// ApplyLinkEvent applies an event that names core links (scenario.Event
// Links) to a running world: action down, up or set (with patch), in
// direction dir, on all the links at once, through the link emulator.
// With pinned spread, down and up also tell the pinning program, so that
// new flows skip dead links (flows pinned to one stay there). Links this
// world did not build (a pair whose paths the variant leaves out) are
// skipped and named in the detail; when none is left, nothing is done.
func (w *World) ApplyLinkEvent(links []string, action scenario.Action, dir scenario.Dir, patch scenario.Patch) (detail string, err error) {
	var here, skipped []string
	for _, l := range links {
		if w.CoreLink(l) != nil {
			here = append(here, l)
		} else {
			skipped = append(skipped, l)
		}
	}
	note := ""
	if len(skipped) > 0 {
		note = "; not in this variant, skipped: " + strings.Join(skipped, ", ")
	}
	if len(here) == 0 {
		return "core links not in this variant, skipped: " + strings.Join(skipped, ", "), nil
	}
	if dir == "" {
		dir = scenario.DirBoth
	}
	req := Request{Links: here, Dir: dir}
	switch action {
	case scenario.ActSet:
		if patch.Empty() {
			return "", errors.New("a set event needs the keys to change")
		}
		req.Op = "set"
		req.Patch = &patch
	case scenario.ActDown, scenario.ActUp:
		req.Op = string(action)
	default:
		return "", fmt.Errorf("action %q does not apply to core links (valid: set, down, up)", action)
	}
	resp, err := Control(w.Dir, req)
	if err != nil {
		return "", err
	}
	var parts []string
	for _, l := range here {
		st := resp.Links[l]
		switch action {
		case scenario.ActSet:
			parts = append(parts, fmt.Sprintf("%s: up %s; down %s", l, st.Up.Params, st.Down.Params))
		default:
			s := fmt.Sprintf("%s %s", l, action)
			if st.Pin != nil {
				s += fmt.Sprintf(" (pinning: alive=%v)", st.Pin.Alive)
			}
			parts = append(parts, s)
		}
	}
	return strings.Join(parts, "; ") + note, nil
}

// PairSpread is how one (client address, server address) pair's traffic
// was spread over its core links.
type PairSpread struct {
	ClientPath string   `json:"client_path"`
	ServerPath string   `json:"server_path"`
	Links      []string `json:"links"`
	// Per link, in the order of Links: packets delivered client → server
	// (up) and server → client (down), bytes that entered the link in each
	// direction (drops included), and with pinned spread the flows pinned
	// to it.
	UpPackets   []uint64 `json:"up_packets"`
	DownPackets []uint64 `json:"down_packets"`
	UpBytes     []uint64 `json:"up_bytes"`
	DownBytes   []uint64 `json:"down_bytes"`
	Flows       []uint64 `json:"pinned_flows,omitempty"`
	// LinksUsed is how many of the pair's links carried packets up.
	LinksUsed int `json:"links_used"`
	// FlowsMin and FlowsMax bound the pinned flows per link (pinned).
	FlowsMin uint64 `json:"pinned_flows_min,omitempty"`
	FlowsMax uint64 `json:"pinned_flows_max,omitempty"`
}

// CoreSpread summarises, per address pair, how the emulator's counters
// (a "stats" response's Links, as summary.json keeps them) spread over the
// pair's core links. It needs a core with links per pair; nil otherwise.
func (p *Plan) CoreSpread(links map[string]LinkState) []PairSpread {
	var out []PairSpread
	idx := map[[2]string]int{}
	for _, cl := range p.CoreLinks {
		if cl.ClientPath == "" {
			return nil
		}
		k := [2]string{cl.ClientPath, cl.ServerPath}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, PairSpread{ClientPath: cl.ClientPath, ServerPath: cl.ServerPath})
		}
		ps := &out[i]
		st := links[cl.Name]
		ps.Links = append(ps.Links, cl.Name)
		ps.UpPackets = append(ps.UpPackets, st.Up.Stats.Delivered)
		ps.DownPackets = append(ps.DownPackets, st.Down.Stats.Delivered)
		ps.UpBytes = append(ps.UpBytes, st.Up.Stats.Bytes)
		ps.DownBytes = append(ps.DownBytes, st.Down.Stats.Bytes)
		if st.Up.Stats.Delivered > 0 {
			ps.LinksUsed++
		}
		if st.Pin != nil {
			f := st.Pin.Flows
			if len(ps.Flows) == 0 || f < ps.FlowsMin {
				ps.FlowsMin = f
			}
			ps.FlowsMax = max(ps.FlowsMax, f)
			ps.Flows = append(ps.Flows, f)
		}
	}
	return out
}
