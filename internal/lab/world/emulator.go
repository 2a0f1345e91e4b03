package world

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/monoclock"
)

// Request is one command on the emulator's control socket.
type Request struct {
	Op    string          `json:"op"` // set, down, up, origin, stats
	Link  string          `json:"link,omitempty"`
	Dir   scenario.Dir    `json:"dir,omitempty"`
	Patch *scenario.Patch `json:"patch,omitempty"`
}

// Response answers a Request.
type Response struct {
	OK    bool                 `json:"ok"`
	Error string               `json:"error,omitempty"`
	Links map[string]LinkState `json:"links,omitempty"`
}

// LinkState is the live state of both directions of a link.
type LinkState struct {
	Up   DirState `json:"up"`
	Down DirState `json:"down"`
}

// DirState is one direction's parameters and counters.
type DirState struct {
	Params string             `json:"params"`
	Down   bool               `json:"down"`
	Stats  linkemu.Stats      `json:"stats"`
	Ups    []linkemu.UpRecord `json:"ups,omitempty"`
}

type emuLink struct {
	plan     LinkPlan
	devs     []linkemu.Device
	up, down *linkemu.Direction
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
			plan: lp,
			devs: []linkemu.Device{a, b},
			up:   linkemu.NewDirection(lp.Name+"/up", a, b, linkemu.NewPipe(lp.Up, seed)),
			down: linkemu.NewDirection(lp.Name+"/down", b, a, linkemu.NewPipe(lp.Down, seed+1)),
		}
		links = append(links, l)
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
			go serveControl(c, links)
		}
	}()
	<-ctx.Done()
	ln.Close()
	// Closing the devices unblocks the readers.
	closeAll()
	wg.Wait()
	return nil
}

func serveControl(c net.Conn, links []*emuLink) {
	defer c.Close()
	sc := bufio.NewScanner(c)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	enc := json.NewEncoder(c)
	for sc.Scan() {
		var req Request
		var resp Response
		if err := json.Unmarshal(sc.Bytes(), &req); err != nil {
			resp.Error = "bad request: " + err.Error()
		} else if err := handle(req, links, &resp); err != nil {
			resp.Error = err.Error()
		} else {
			resp.OK = true
		}
		if err := enc.Encode(resp); err != nil {
			return
		}
	}
}

func handle(req Request, links []*emuLink, resp *Response) error {
	now := linkemu.Now()
	var targets []*emuLink
	for _, l := range links {
		if req.Link == "" || l.plan.Name == req.Link {
			targets = append(targets, l)
		}
	}
	if req.Link != "" && len(targets) == 0 {
		var names []string
		for _, l := range links {
			names = append(names, l.plan.Name)
		}
		return fmt.Errorf("no link %q (links: %v)", req.Link, names)
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
				d.With(func(p *linkemu.Pipe) { p.SetParams(req.Patch.Apply(p.Params())) })
			}
		}
	case "down", "up":
		for _, l := range targets {
			for _, d := range dirs(l) {
				d.With(func(p *linkemu.Pipe) { p.SetDown(req.Op == "down", now) })
			}
		}
	case "origin":
		// Schedules (outages, traces) restart now: `lab run` calls this when
		// its traffic starts so that "at: 5s" means 5 s into the transfer.
		for _, l := range targets {
			for _, d := range []*linkemu.Direction{l.up, l.down} {
				d.With(func(p *linkemu.Pipe) { p.SetOrigin(now) })
			}
		}
	case "stats":
	default:
		return fmt.Errorf("unknown op %q (valid: set, down, up, origin, stats)", req.Op)
	}
	resp.Links = map[string]LinkState{}
	for _, l := range targets {
		var st LinkState
		for i, d := range []*linkemu.Direction{l.up, l.down} {
			var ds DirState
			d.With(func(p *linkemu.Pipe) {
				ds = DirState{Params: p.Params().String(), Down: p.Down(now), Stats: p.Stats(), Ups: p.Ups()}
			})
			if i == 0 {
				st.Up = ds
			} else {
				st.Down = ds
			}
		}
		resp.Links[l.plan.Name] = st
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
