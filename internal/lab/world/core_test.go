package world_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
	"mpsteer/internal/units"
)

// A 2×2 M-fullmesh world: two client addresses, two server addresses, M
// core links for every pair; path a's access link is emulated (a TUN, an
// L3 device at r1), path b's a plain veth (L2).
func fullmesh(m int) string {
	return fmt.Sprintf(`
core: {links_per_pair: %d, rate: 100mbit, delay: 1ms}
paths:
  - {name: a, via: core, rate: 1gbit}
  - {name: b, via: core}
traffic: [{type: bulk, duration: 2s}]
variants:
  - mptcp
  - {name: pinned, spread: pinned}
  - {name: userspace, path_manager: {client: userspace}}
`, m)
}

func TestPlanPerPairCore(t *testing.T) {
	s := parse(t, fullmesh(2))
	plan, err := world.NewPlan("plan", s, s.Variant("pinned"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, cl := range plan.CoreLinks {
		names = append(names, cl.Name)
	}
	if got := strings.Join(names, " "); got != "c1x1-0 c1x1-1 c1x2-0 c1x2-1 c2x1-0 c2x1-1 c2x2-0 c2x2-1" {
		t.Fatalf("core links %s", got)
	}
	c12 := plan.CoreLink("c1x2-1")
	if c12.ClientAddr != plan.Path("a").Client.Addr || c12.ServerAddr != plan.Path("b").Server.Addr || c12.Mark != world.MarkBase+3 || c12.ID != 3 {
		t.Fatalf("c1x2-1: %+v", c12)
	}
	if a, b := plan.Path("a"), plan.Path("b"); a.Veth || a.Link == "" || !b.Veth || b.Link != "" {
		t.Fatalf("access links: a %+v, b %+v (want a emulated, b a veth)", a, b)
	}
	// r1 routes by source and destination; pinned adds a mark rule per link.
	var fromTo, marks int
	for _, r := range plan.Rules {
		if r.Host == world.R1 && r.From.IsValid() && r.To.IsValid() {
			fromTo++
		}
		if r.Host == world.R2 && r.Mark != 0 {
			marks++
		}
	}
	if fromTo != 4 || marks != 8 {
		t.Fatalf("r1 has %d source+destination rules (want 4), r2 %d mark rules (want 8)", fromTo, marks)
	}
	// The server announces path b's address; limits allow all four pairs.
	if ep := plan.Path("b").ServerEndpoint; ep == nil || *ep != pm.FlagSignal || plan.Path("a").ServerEndpoint != nil {
		t.Fatalf("server endpoints: a %v, b %v", plan.Path("a").ServerEndpoint, plan.Path("b").ServerEndpoint)
	}
	if plan.Limits.Subflows != 3 || plan.Limits.AddAddrAccepted != 1 {
		t.Fatalf("limits %+v, want 3 subflows, 1 add_addr_accepted", plan.Limits)
	}

	// Userspace path manager for the client: its sysctl, and no endpoints.
	plan, err = world.NewPlan("plan", s, s.Variant("userspace"))
	if err != nil {
		t.Fatal(err)
	}
	if c, sv := plan.Host(world.Client), plan.Host(world.Server); c.Sysctls["net.mptcp.path_manager"] != "userspace" || c.PathManager != "userspace" ||
		sv.PathManager != "kernel" || sv.Sysctls["net.mptcp.path_manager"] != "" {
		t.Fatalf("path managers: client %+v, server %+v", c, sv)
	}
	if plan.Path("b").Endpoint != nil || plan.Path("b").ServerEndpoint == nil || plan.Spread != scenario.SpreadECMP {
		t.Fatalf("userspace client: endpoint %v, server endpoint %v, spread %s", plan.Path("b").Endpoint, plan.Path("b").ServerEndpoint, plan.Spread)
	}

	// A variant over path a alone builds only the pair (a, a).
	s2 := parse(t, fullmesh(2)+"  - {name: only-a, paths: [a]}\n")
	plan, err = world.NewPlan("plan", s2, s2.Variant("only-a"))
	if err != nil {
		t.Fatal(err)
	}
	if len(plan.CoreLinks) != 2 || plan.CoreLinks[0].Name != "c1x1-0" {
		t.Fatalf("only-a core links %+v", plan.CoreLinks)
	}
}

// sink accepts TCP connections in a namespace and reads them to the end.
func sink(t *testing.T, ns string, addr netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	err := netnsutil.Do(ns, func() (err error) {
		ln, err = net.Listen("tcp4", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { io.Copy(io.Discard, c); c.Close() }()
		}
	}()
}

// send opens a plain TCP connection from src to dst in namespace ns and
// writes n bytes.
func send(ns string, src netip.Addr, dst netip.AddrPort, n int) error {
	var c net.Conn
	err := netnsutil.Do(ns, func() (err error) {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: src.AsSlice()}, Timeout: 5 * time.Second}
		c, err = d.Dial("tcp4", dst.String())
		return err
	})
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	_, err = c.Write(make([]byte, n))
	return err
}

// flows runs count connections from path cp's client address to path sp's
// server address at once, and waits for them.
func flows(t *testing.T, w *world.World, cp, sp string, count, size int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, count)
	for i := 0; i < count; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- send(w.Host(world.Client).NetNS, w.Path(cp).Client.Addr, netip.AddrPortFrom(w.Path(sp).Server.Addr, 5300), size)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("flow %s→%s: %v", cp, sp, err)
		}
	}
}

func stats(t *testing.T, w *world.World) map[string]world.LinkState {
	t.Helper()
	resp, err := world.Control(w.Dir, world.Request{Op: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	return resp.Links
}

// ECMP over a pair's links: many flows of one pair use all of its links
// and no other pair's.
func TestPerPairCoreSpreadsByECMP(t *testing.T) {
	testutil.RequireLab(t)
	w := up(t, parse(t, fullmesh(2)), "mptcp", labName(t, "ecmp"))
	for _, sp := range []string{"a", "b"} {
		sink(t, w.Host(world.Server).NetNS, netip.AddrPortFrom(w.Path(sp).Server.Addr, 5300))
	}
	// Pair (a, b) alone first: its links only.
	flows(t, w, "a", "b", 16, 32<<10)
	st := stats(t, w)
	for _, cl := range w.CoreLinks {
		got := st[cl.Name].Up.Stats.Delivered
		if mine := cl.ClientPath == "a" && cl.ServerPath == "b"; mine && got == 0 {
			t.Errorf("%s carried nothing of 16 flows a→b", cl.Name)
		} else if !mine && got > 0 {
			t.Errorf("%s carried %d packets of pair a→b", cl.Name, got)
		}
	}
	// Every pair: each of its links carries some of the flows.
	for _, cp := range []string{"a", "b"} {
		for _, sp := range []string{"a", "b"} {
			flows(t, w, cp, sp, 16, 32<<10)
		}
	}
	sum := w.CoreSpread(stats(t, w))
	if len(sum) != 4 {
		t.Fatalf("spread over %d pairs, want 4: %+v", len(sum), sum)
	}
	for _, ps := range sum {
		if ps.LinksUsed != 2 {
			t.Errorf("pair %s→%s used %d of 2 links: %+v", ps.ClientPath, ps.ServerPath, ps.LinksUsed, ps)
		}
	}
}

// The kernel path manager, with the server announcing its second address,
// opens subflows to both server addresses.
func TestKernelPMUsesBothServerAddresses(t *testing.T) {
	testutil.RequireLab(t)
	w := up(t, parse(t, fullmesh(1)), "mptcp", labName(t, "kpm"))
	h, err := netnsutil.Open(w.Host(world.Client).NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	eps, err := testutil.DialPM(t, w.Host(world.Server).NetNS).Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 || eps[0].Addr != w.Path("b").Server.Addr || eps[0].Flags&pm.FlagSignal == 0 {
		t.Fatalf("server endpoints %v, want one signal endpoint for %s", eps, w.Path("b").Server.Addr)
	}
	sampler, err := observe.NewSampler(int(h))
	if err != nil {
		t.Fatal(err)
	}
	defer sampler.Close()
	b := &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
		Server: netip.AddrPortFrom(w.Path("a").Server.Addr, 5201), Proto: traffic.MPTCP, Upload: true, Duration: 1500 * time.Millisecond}
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	pairs := map[[2]netip.Addr]uint64{}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(100 * time.Millisecond):
			sfs, err := sampler.Subflows()
			if err != nil {
				t.Fatal(err)
			}
			for _, sf := range sfs {
				k := [2]netip.Addr{sf.Local.Addr(), sf.Remote.Addr()}
				pairs[k] = max(pairs[k], sf.BytesAcked)
			}
		}
	}
	to := map[netip.Addr]uint64{}
	for k, acked := range pairs {
		to[k[1]] += acked
	}
	for _, p := range []string{"a", "b"} {
		if to[w.Path(p).Server.Addr] < 64<<10 {
			t.Errorf("subflows to %s (path %s) carried %d bytes; subflows: %v", w.Path(p).Server.Addr, p, to[w.Path(p).Server.Addr], pairs)
		}
	}
	t.Logf("subflows (local, remote) → bytes acked: %v", pairs)
}

// Pinned spread: N flows of one pair land on N distinct links, replies come
// back over the same link, and new flows skip a link that is down.
func TestPinnedSpread(t *testing.T) {
	testutil.RequireLab(t)
	w := up(t, parse(t, fullmesh(4)), "pinned", labName(t, "pin"))
	for _, sp := range []string{"a", "b"} {
		sink(t, w.Host(world.Server).NetNS, netip.AddrPortFrom(w.Path(sp).Server.Addr, 5300))
	}
	pinned := func(st map[string]world.LinkState, name string) uint64 {
		t.Helper()
		p := st[name].Pin
		if p == nil {
			t.Fatalf("%s: no pinning state in the emulator's stats", name)
		}
		return p.Flows
	}

	// One flow b→b (veth access link): link c2x2-0, in both directions.
	flows(t, w, "b", "b", 1, 64<<10)
	st := stats(t, w)
	for k := 0; k < 4; k++ {
		name := fmt.Sprintf("c2x2-%d", k)
		up, down, n := st[name].Up.Stats.Delivered, st[name].Down.Stats.Delivered, pinned(st, name)
		if k == 0 && (n != 1 || up == 0 || down == 0) {
			t.Errorf("%s: %d flows pinned, %d packets up, %d down; want the flow, both ways", name, n, up, down)
		}
		if k > 0 && (n != 0 || up != 0 || down != 0) {
			t.Errorf("%s: %d flows pinned, %d packets up, %d down; want none", name, n, up, down)
		}
	}

	// Four flows a→a (emulated access link): one per link.
	for i := 0; i < 4; i++ {
		flows(t, w, "a", "a", 1, 64<<10)
	}
	st = stats(t, w)
	for k := 0; k < 4; k++ {
		name := fmt.Sprintf("c1x1-%d", k)
		if n := pinned(st, name); n != 1 || st[name].Up.Stats.Delivered == 0 || st[name].Down.Stats.Delivered == 0 {
			t.Errorf("%s: %d flows pinned, %d packets up, %d down; want 1 flow, both ways", name, n, st[name].Up.Stats.Delivered, st[name].Down.Stats.Delivered)
		}
	}

	// c1x1-0 fails: the next three flows go to the other three links.
	detail, err := w.ApplyLinkEvent([]string{"c1x1-0", "c9x9-0"}, scenario.ActDown, scenario.DirBoth, scenario.Patch{})
	if err != nil || !strings.Contains(detail, "c1x1-0 down (pinning: alive=false)") || !strings.Contains(detail, "skipped: c9x9-0") {
		t.Fatalf("link event: %q, %v", detail, err)
	}
	// Counted after the link went down: the earlier flows' last packets
	// (their closing ACKs) may still have crossed it before that.
	before := stats(t, w)["c1x1-0"].Up.Stats.Delivered
	flows(t, w, "a", "a", 3, 64<<10)
	st = stats(t, w)
	if n := pinned(st, "c1x1-0"); n != 1 || st["c1x1-0"].Up.Stats.Delivered != before {
		t.Errorf("dead c1x1-0: %d flows pinned, %d packets delivered (%d before); want no new flow", n, st["c1x1-0"].Up.Stats.Delivered, before)
	}
	for k := 1; k < 4; k++ {
		if n := pinned(st, fmt.Sprintf("c1x1-%d", k)); n != 2 {
			t.Errorf("c1x1-%d: %d flows pinned, want 2", k, n)
		}
	}
	if _, err := w.ApplyLinkEvent([]string{"c1x1-0"}, scenario.ActUp, scenario.DirBoth, scenario.Patch{}); err != nil {
		t.Fatal(err)
	}
	if st = stats(t, w); !st["c1x1-0"].Pin.Alive {
		t.Error("c1x1-0 is up again, but the pinning program still counts it dead")
	}
	r := 20 * units.Mbit
	if detail, err := w.ApplyLinkEvent([]string{"c1x2-0", "c1x2-1"}, scenario.ActSet, scenario.DirUp, scenario.Patch{Rate: &r}); err != nil || strings.Count(detail, "up 20mbit") != 2 {
		t.Errorf("set on two links: %q, %v", detail, err)
	}
}

// A userspace path manager is set per host, and such a host gets no
// kernel endpoints.
func TestUserspacePathManager(t *testing.T) {
	testutil.RequireLab(t)
	w := up(t, parse(t, fullmesh(1)), "userspace", labName(t, "upm"))
	for host, want := range map[string]string{world.Client: "userspace", world.Server: "kernel"} {
		var got string
		err := netnsutil.Do(w.Host(host).NetNS, func() (err error) {
			got, err = netnsutil.ReadPathManager()
			return err
		})
		if err != nil || got != want {
			t.Errorf("%s: path manager %q (%v), want %s", host, got, err, want)
		}
		eps, err := testutil.DialPM(t, w.Host(host).NetNS).Endpoints()
		if err != nil {
			t.Fatal(err)
		}
		if n := map[string]int{world.Client: 0, world.Server: 1}[host]; len(eps) != n {
			t.Errorf("%s: endpoints %v, want %d", host, eps, n)
		}
	}
}
