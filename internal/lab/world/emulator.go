package world

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/corepin"
	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/monoclock"
)

// Request is one command on the emulator's control socket.
type Request struct {
	Op string `json:"op"` // set, down, up, origin, stats
	// Link names the link to act on; Links several, acted on at once.
	// set, down and up need at least one; origin and stats without any
	// act on every link.
	Link  string          `json:"link,omitempty"`
	Links []string        `json:"links,omitempty"`
	Dir   scenario.Dir    `json:"dir,omitempty"`
	Patch *scenario.Patch `json:"patch,omitempty"`
	// Window is the span "recent" counts over (lasthop.go).
	Window time.Duration `json:"window_ns,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK    bool                 `json:"ok"`
	Error string               `json:"error,omitempty"`
	Links map[string]LinkState `json:"links,omitempty"`
	// PinCounters are the pinning program's counts of packets it left to
	// ECMP (pinned spread only): no_live_link, unpinned_reverse.
	PinCounters map[string]uint64 `json:"pin_counters,omitempty"`
	// Recent answers "recent": per link, what each direction did with its
	// packets over the window (lasthop.go).
	Recent map[string]RecentLink `json:"recent,omitempty"`
}

// LinkState is the live state of both directions of a link.
type LinkState struct {
	Up   DirState `json:"up"`
	Down DirState `json:"down"`
	// Pin is what the pinning program knows of a core link (pinned
	// spread only): flows pinned to it, packets it marked for it, and
	// whether it counts the link as alive.
	Pin *corepin.LinkStats `json:"pin,omitempty"`
}

// DirState is one direction's parameters and counters.
type DirState struct {
	Params string             `json:"params"`
	Down   bool               `json:"down"`
	Stats  linkemu.Stats      `json:"stats"`
	Ups    []linkemu.UpRecord `json:"ups,omitempty"`
	// Origin is when the schedules started (the emulator's clock, as are
	// the times in Ups): Ups[i].UpAt - Origin is the link-up's time into
	// the transfer.
	Origin time.Duration `json:"origin_ns,omitempty"`
}

type emuLink struct {
	plan     LinkPlan
	devs     []linkemu.Device
	up, down *linkemu.Direction
	// coreID is the link's id for the pinning program (-1: not pinned).
	coreID int
	// outageSeed seeds the draws of its outages' jitter (see seeded).
	outageSeed uint64
}

// outageSeed is the seed of a link's outage jitter in a run: the
// scenario's seed, the round (every variant of a round gets the same
// outages, so that they are compared on the same link-up moments; the
// rounds differ) and the link.
func outageSeed(plan *Plan, link int) uint64 {
	return (plan.Seed*1_000_003+uint64(plan.Round))*1_009 + uint64(link)
}

// seeded is a copy of a direction's outage schedules with their jitter's
// seed: the j-th schedule of both directions draws alike.
func (l *emuLink) seeded(sched []linkemu.Outage) []linkemu.Outage {
	out := append([]linkemu.Outage(nil), sched...)
	for j := range out {
		out[j].Seed = l.outageSeed*31 + uint64(j)
	}
	return out
}

// emulator is what the control socket acts on.
type emulator struct {
	links []*emuLink
	pin   *corepin.Pinner // nil unless the spread is pinned

	mu    sync.Mutex
	alive map[int]bool // core id → alive, as last told to the program
}

// RunEmulator is `mpsteer lab emulate`: it creates the TUN devices of every
// link in the plan stored in stateDir, reports readiness on ready, serves
// the control socket and moves packets until ctx ends.
func RunEmulator(ctx context.Context, stateDir string, ready *os.File) error {
	fail := func(err error) error {
		if ready != nil {
			fmt.Fprintf(ready, "error: %v\n", err)
			ready.Close()
		}
		return err
	}
	plan, err := readPlan(stateDir)
	if err != nil {
		return fail(err)
	}
	var links []*emuLink
	closeAll := func() {
		for _, l := range links {
			for _, d := range l.devs {
				d.Close()
			}
		}
	}
	for i, lp := range plan.Links {
		a, err := linkemu.OpenTUN(NetNS(plan.Name, lp.A.Host), lp.A.Dev)
		if err != nil {
			closeAll()
			return fail(err)
		}
		b, err := linkemu.OpenTUN(NetNS(plan.Name, lp.B.Host), lp.B.Dev)
		if err != nil {
			a.Close()
			closeAll()
			return fail(err)
		}
		seed := plan.Seed*1000 + uint64(i)*2
		l := &emuLink{
			plan:       lp,
			devs:       []linkemu.Device{a, b},
			coreID:     -1,
			outageSeed: outageSeed(plan, i),
		}
		up, down := lp.Up, lp.Down
		up.Outages, down.Outages = l.seeded(up.Outages), l.seeded(down.Outages)
		l.up = linkemu.NewDirection(lp.Name+"/up", a, b, linkemu.NewPipe(up, seed))
		l.down = linkemu.NewDirection(lp.Name+"/down", b, a, linkemu.NewPipe(down, seed+1))
		links = append(links, l)
	}
	emu := &emulator{links: links, alive: map[int]bool{}}
	if plan.Spread == scenario.SpreadPinned && len(plan.CoreLinks) > 0 {
		// The pinning program lives as long as this process: its TCX links
		// close with it, also when it crashes.
		if emu.pin, err = startPinner(plan); err != nil {
			closeAll()
			return fail(err)
		}
		defer emu.pin.Close()
		for _, l := range links {
			if cl := plan.CoreLink(l.plan.Name); cl != nil {
				l.coreID = cl.ID
				emu.alive[cl.ID] = true
			}
		}
	}
	sock := filepath.Join(stateDir, "emulator.sock")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		closeAll()
		return fail(fmt.Errorf("control socket: %w", err))
	}
	defer ln.Close()
	if ready != nil {
		fmt.Fprintln(ready, "ready")
		ready.Close()
	}

	monoclock.ReserveThreads(2 * len(links)) // one precise writer per direction
	var wg sync.WaitGroup
	for _, l := range links {
		for _, d := range []*linkemu.Direction{l.up, l.down} {
			wg.Add(1)
			go func(d *linkemu.Direction) { defer wg.Done(); d.Run(ctx) }(d)
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go emu.serveControl(c)
		}
	}()
	if emu.pin != nil {
		// Scheduled outages take links down too: the controller follows.
		go func() {
			t := time.NewTicker(10 * time.Millisecond)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					emu.syncAlive(nil)
				}
			}
		}()
	}
	<-ctx.Done()
	ln.Close()
	// Closing the devices unblocks the readers.
	closeAll()
	wg.Wait()
	return nil
}

// startPinner loads the pinning program with the pairs of the plan's core
// links and attaches it to the routers' devices that face the hosts:
// r1's client-facing devices (it assigns flows there) and r2's
// server-facing ones (it marks the replies there).
func startPinner(plan *Plan) (*corepin.Pinner, error) {
	type key struct{ c, s netip.Addr }
	byPair := map[key][]CoreLinkInfo{}
	var order []key
	for _, cl := range plan.CoreLinks {
		k := key{cl.ClientAddr, cl.ServerAddr}
		if _, ok := byPair[k]; !ok {
			order = append(order, k)
		}
		byPair[k] = append(byPair[k], cl)
	}
	var pairs []corepin.Pair
	for _, k := range order {
		cls := byPair[k]
		sort.Slice(cls, func(i, j int) bool { return cls[i].K < cls[j].K })
		pr := corepin.Pair{Client: k.c, Server: k.s}
		for _, cl := range cls {
			pr.Links = append(pr.Links, uint32(cl.ID))
		}
		pairs = append(pairs, pr)
	}
	// The pinning program attaches through TCX only (no clsact fallback).
	if err := kernelfeat.RequireExactly(kernelfeat.Probe(), kernelfeat.TCX, "variant key spread: pinned"); err != nil {
		return nil, err
	}
	pin, err := corepin.Load(pairs, MarkBase)
	if err != nil {
		return nil, err
	}
	for _, p := range plan.Paths {
		if !p.ViaCore {
			continue
		}
		for _, host := range []string{R1, R2} {
			if err := pin.Attach(NetNS(plan.Name, host), p.Name); err != nil {
				pin.Close()
				return nil, err
			}
		}
	}
	return pin, nil
}

// syncAlive tells the pinning program which core links are down (by hand
// or by a scheduled outage, in either direction); only targets when given.
func (e *emulator) syncAlive(targets []*emuLink) {
	if e.pin == nil {
		return
	}
	if targets == nil {
		targets = e.links
	}
	now := linkemu.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, l := range targets {
		if l.coreID < 0 {
			continue
		}
		down := false
		for _, d := range []*linkemu.Direction{l.up, l.down} {
			d.With(func(p *linkemu.Pipe) { down = down || p.Down(now) })
		}
		if e.alive[l.coreID] == !down {
			continue
		}
		if err := e.pin.SetAlive(uint32(l.coreID), !down); err != nil {
			log.Printf("%s: tell the pinning program: %v", l.plan.Name, err)
			continue
		}
		e.alive[l.coreID] = !down
	}
}

func (e *emulator) serveControl(c net.Conn) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else if err := e.handle(req, &resp); err != nil {
			resp.Error = err.Error()
		} else {
			resp.OK = true
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

func (e *emulator) handle(req Request, resp *Response) error {
	now := linkemu.Now()
	names := req.Links
	if req.Link != "" {
		names = append([]string{req.Link}, names...)
	}
	var targets []*emuLink
	if len(names) == 0 {
		if req.Op == "set" || req.Op == "down" || req.Op == "up" {
			return fmt.Errorf("%s needs the link to act on", req.Op)
		}
		targets = e.links
	}
	for _, n := range names {
		var found *emuLink
		for _, l := range e.links {
			if l.plan.Name == n {
				found = l
			}
		}
		if found == nil {
			var all []string
			for _, l := range e.links {
				all = append(all, l.plan.Name)
			}
			return fmt.Errorf("no link %q (links: %v)", n, all)
		}
		targets = append(targets, found)
	}
	dirs := func(l *emuLink) []*linkemu.Direction {
		switch req.Dir {
		case scenario.DirUp:
			return []*linkemu.Direction{l.up}
		case scenario.DirDown:
			return []*linkemu.Direction{l.down}
		default:
			return []*linkemu.Direction{l.up, l.down}
		}
	}
	switch req.Op {
	case "set":
		if req.Patch == nil {
			return errors.New("set needs a patch")
		}
		for _, l := range targets {
			for _, d := range dirs(l) {
				d.With(func(p *linkemu.Pipe) {
					np := req.Patch.Apply(p.Params())
					np.Outages = l.seeded(np.Outages)
					p.SetParams(np)
				})
			}
		}
	case "down", "up":
		for _, l := range targets {
			for _, d := range dirs(l) {
				d.With(func(p *linkemu.Pipe) { p.SetDown(req.Op == "down", now) })
			}
		}
		// The controller sees the ports go down (or up) at once.
		e.syncAlive(targets)
	case "origin":
		// Schedules (outages, traces) restart now: `lab run` calls this when
		// its traffic starts so that "at: 5s" means 5 s into the transfer.
		for _, l := range targets {
			for _, d := range []*linkemu.Direction{l.up, l.down} {
				d.With(func(p *linkemu.Pipe) { p.SetOrigin(now) })
			}
		}
	case "stats":
	case "recent":
		e.recent(targets, req.Window, now, resp)
		return nil
	default:
		return fmt.Errorf("unknown op %q (valid: set, down, up, origin, stats, recent)", req.Op)
	}
	resp.Links = map[string]LinkState{}
	for _, l := range targets {
		var st LinkState
		for i, d := range []*linkemu.Direction{l.up, l.down} {
			var ds DirState
			d.With(func(p *linkemu.Pipe) {
				ds = DirState{Params: p.Params().String(), Down: p.Down(now), Stats: p.Stats(), Ups: p.Ups(), Origin: p.Origin()}
			})
			if i == 0 {
				st.Up = ds
			} else {
				st.Down = ds
			}
		}
		if e.pin != nil && l.coreID >= 0 {
			if ps, err := e.pin.Stats(uint32(l.coreID)); err == nil {
				st.Pin = &ps
			}
		}
		resp.Links[l.plan.Name] = st
	}
	if e.pin != nil {
		resp.PinCounters = e.pin.Counters()
	}
	return nil
}

// Control sends one request to a running emulator.
func Control(stateDir string, req Request) (*Response, error) {
	c, err := net.DialTimeout("unix", filepath.Join(stateDir, "emulator.sock"), 2*time.Second)
	if err != nil {
		return nil, fmt.Errorf("the link emulator is not reachable (%v); is the lab up?", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if err := json.NewEncoder(c).Encode(req); err != nil {
		return nil, err
	}
	var resp Response
	if err := json.NewDecoder(c).Decode(&resp); err != nil {
		return nil, fmt.Errorf("emulator reply: %w", err)
	}
	if !resp.OK {
		return &resp, errors.New(resp.Error)
	}
	return &resp, nil
}

func readPlan(stateDir string) (*Plan, error) {
	data, err := os.ReadFile(filepath.Join(stateDir, "plan.json"))
	if err != nil {
		return nil, err
	}
	var p Plan
	if err := json.Unmarshal(data, &p); err != nil {
		return nil, fmt.Errorf("plan.json: %w", err)
	}
	return &p, nil
}

func init() { log.SetFlags(log.Ltime | log.Lmicroseconds) }
