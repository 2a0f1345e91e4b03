package world

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/lasthop"
)

// The lab's last-hop source: the link emulator stands in for a host's
// radio. It publishes, per link and direction, what it did with the
// packets over a recent window (delivered, dropped by loss, by outage, by
// its queue) — what it observed, never what it was configured to do — and
// a daemon in a lab host asks it about the links that deliver to that
// host (`report_health: {source: lab}`). Queue drops are congestion, not
// a failing radio, and do not count against the last hop.

// RecentLink is what both directions of a link did over the window.
type RecentLink struct {
	Up   linkemu.RecentCounts `json:"up"`
	Down linkemu.RecentCounts `json:"down"`
}

// recent answers the "recent" op.
func (e *emulator) recent(targets []*emuLink, window, now time.Duration, resp *Response) {
	if window <= 0 {
		window = 100 * time.Millisecond
	}
	resp.Recent = map[string]RecentLink{}
	for _, l := range targets {
		resp.Recent[l.plan.Name] = RecentLink{Up: l.up.Recent(now, window), Down: l.down.Recent(now, window)}
	}
}

// labHop is the emulated link that delivers to one of the host's devices.
type labHop struct {
	link string
	up   bool // the link's "up" direction (A → B) ends at this host
}

type labSource struct {
	dir    string
	window time.Duration
	min    int
	links  []string
	byDev  map[string]labHop
}

// findLab returns the state directory and plan of the lab that has a host
// in network namespace ns.
func findLab(ns string) (string, *Plan, string, error) {
	ents, err := os.ReadDir(StateRoot)
	if err != nil {
		return "", nil, "", fmt.Errorf("no lab is running (%v)", err)
	}
	for _, e := range ents {
		dir := filepath.Join(StateRoot, e.Name())
		p, err := readPlan(dir)
		if err != nil {
			continue
		}
		for _, h := range p.Hosts {
			if h.NetNS == ns {
				return dir, p, h.Role, nil
			}
		}
	}
	return "", nil, "", fmt.Errorf("network namespace %q is no host of a running lab", ns)
}

// LabSource opens the lab's last-hop source ("lab" in a daemon's
// report_health): the emulator's counts of each link towards the host.
func LabSource(o lasthop.Options) (lasthop.Source, error) {
	var dir, role string
	var plan *Plan
	var err error
	if o.Dir != "" {
		dir = o.Dir
		if plan, err = readPlan(dir); err != nil {
			return nil, fmt.Errorf("lab state %s: %w", dir, err)
		}
		for _, h := range plan.Hosts {
			if h.NetNS == o.NetNS {
				role = h.Role
			}
		}
		if role == "" {
			return nil, fmt.Errorf("network namespace %q is no host of the lab in %s", o.NetNS, dir)
		}
	} else if dir, plan, role, err = findLab(o.NetNS); err != nil {
		return nil, err
	}
	s := &labSource{dir: dir, window: o.Window, min: o.MinPackets, byDev: map[string]labHop{}}
	if s.window <= 0 {
		s.window = 50 * time.Millisecond
	}
	want := map[string]bool{}
	for _, n := range o.Interfaces {
		want[n] = true
	}
	add := func(dev string, h labHop) {
		if len(want) > 0 && !want[dev] {
			return
		}
		s.byDev[dev] = h
		s.links = append(s.links, h.link)
	}
	for _, l := range plan.Links {
		if l.B.Host == role {
			add(l.B.Dev, labHop{link: l.Name, up: true})
		}
		if l.A.Host == role {
			add(l.A.Dev, labHop{link: l.Name, up: false})
		}
	}
	if len(s.byDev) == 0 {
		return nil, fmt.Errorf("host %s of the lab in %s has no emulated link", role, dir)
	}
	return s, nil
}

// Interval: a fifth of the window, at least the emulator's resolution.
func (s *labSource) Interval() time.Duration { return max(s.window/5, linkemu.RecentBucket) }

func (s *labSource) Close() error { return nil }

func (s *labSource) Sample() (map[string]lasthop.Sample, error) {
	resp, err := Control(s.dir, Request{Op: "recent", Links: s.links, Window: s.window})
	if err != nil {
		return nil, err
	}
	out := map[string]lasthop.Sample{}
	for dev, h := range s.byDev {
		rl, ok := resp.Recent[h.link]
		if !ok {
			continue
		}
		c := rl.Down
		if h.up {
			c = rl.Up
		}
		smp := lasthop.Ratio(c.Delivered, c.DropLoss+c.DropOutage, s.min)
		smp.Detail = fmt.Sprintf("%s over %v: %d delivered, %d lost, %d in an outage (%d queue drops not counted)",
			h.link, c.WindowNs, c.Delivered, c.DropLoss, c.DropOutage, c.DropQueue)
		out[dev] = smp
	}
	return out, nil
}
