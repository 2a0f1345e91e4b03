package world_test

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

func parse(t *testing.T, src string) *scenario.Scenario {
	t.Helper()
	s, err := scenario.Parse(filepath.Join(t.TempDir(), "s.yaml"), []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func labName(t *testing.T, tag string) string {
	return fmt.Sprintf("t%d-%s", os.Getpid()%100000, tag)
}

// up builds a world and registers its removal (and a check that it is
// really gone) for every outcome of the test.
func up(t *testing.T, s *scenario.Scenario, variant, name string) *world.World {
	t.Helper()
	plan, err := world.NewPlan(name, s, s.Variant(variant))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	w, err := world.Up(ctx, plan, world.Options{Binary: testutil.Binary(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := w.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
		assertGone(t, w)
	})
	return w
}

func assertGone(t *testing.T, w *world.World) {
	t.Helper()
	for _, h := range w.Hosts {
		if netnsutil.Exists(h.NetNS) {
			t.Errorf("namespace %s still exists after down", h.NetNS)
		}
	}
	if _, err := os.Stat(w.Dir); err == nil {
		t.Errorf("state directory %s still exists after down", w.Dir)
	}
	if syscall.Kill(w.EmulatorPID, 0) == nil {
		if b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", w.EmulatorPID)); strings.Contains(string(b), w.Dir) {
			t.Errorf("emulator %d still runs after down", w.EmulatorPID)
		}
	}
}

const twoPaths = `
paths:
  - {name: a, rate: 40mbit, delay: 5ms}
  - {name: b, rate: 40mbit, delay: 5ms}
traffic: [{type: bulk, duration: 2s}]
`

func TestWorldCarriesMPTCPOverBothPathsAndGoesAway(t *testing.T) {
	testutil.RequireLab(t)
	w := up(t, parse(t, twoPaths), "mptcp", labName(t, "mp"))

	// Each host has a TCP hash of its own, sized for the lab.
	for _, role := range []string{world.Client, world.Server} {
		var got string
		netnsutil.Do(w.Host(role).NetNS, func() error {
			got, _ = netnsutil.ReadSysctl("net.ipv4.tcp_ehash_entries")
			return nil
		})
		if got != fmt.Sprint(world.HostEhash) {
			t.Errorf("%s: tcp_ehash_entries %q, want %d (its own)", role, got, world.HostEhash)
		}
	}

	// The client's second path is a subflow endpoint; limits allow it.
	h, err := netnsutil.Open(w.Host(world.Client).NetNS)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	c, err := pm.Dial(pm.Options{NetNS: int(h)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	eps, err := c.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	if len(eps) != 1 || eps[0].Addr != w.Path("b").Client.Addr || eps[0].Flags&pm.FlagSubflow == 0 {
		t.Fatalf("client endpoints %v, want one subflow endpoint for path b", eps)
	}

	b := &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
		Server: netip.AddrPortFrom(w.Path("a").Server.Addr, 5201), Proto: traffic.MPTCP, Upload: true, Duration: 2 * time.Second}
	sampler, err := observe.NewSampler(int(h))
	if err != nil {
		t.Fatal(err)
	}
	defer sampler.Close()
	acked := map[netip.Addr]uint64{}
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		case <-time.After(200 * time.Millisecond):
			sfs, err := sampler.Subflows()
			if err != nil {
				t.Fatal(err)
			}
			for _, sf := range sfs {
				acked[sf.Local.Addr()] = max(acked[sf.Local.Addr()], sf.BytesAcked)
			}
		}
	}
	// Both subflows carried data, as the kernel counts it.
	for _, p := range []string{"a", "b"} {
		if got := acked[w.Path(p).Client.Addr]; got < 1<<20 {
			t.Errorf("path %s: %d bytes acked, want at least 1 MiB", p, got)
		}
	}
	// 2 × 40 mbit for 2 s is at most 20 MB; anything near means both paths worked.
	if got := b.Meter.Bytes(); got < 10e6 {
		t.Errorf("received %d bytes in 2 s over 2×40 mbit, want > 10 MB", got)
	}
}

func TestTwoLabsSideBySide(t *testing.T) {
	testutil.RequireLab(t)
	s := parse(t, twoPaths)
	w1 := up(t, s, "tcp", labName(t, "one"))
	w2 := up(t, s, "tcp", labName(t, "two"))
	for _, w := range []*world.World{w1, w2} {
		b := &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
			Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201), Proto: traffic.TCP, Upload: true, Size: 1 << 20}
		res, err := b.Run(context.Background())
		if err != nil || res.Bytes != 1<<20 {
			t.Fatalf("lab %s: %d bytes, %v", w.Name, res.Bytes, err)
		}
	}
	if w1.Host(world.Client).NetNS == w2.Host(world.Client).NetNS {
		t.Fatal("two labs share a namespace name")
	}
}

func TestCoreWithECMP(t *testing.T) {
	testutil.RequireLab(t)
	s := parse(t, `
core: {links: 2, rate: 100mbit, delay: 1ms}
paths:
  - {name: a, via: core, rate: 1gbit}
  - {name: b, via: core, rate: 1gbit}
traffic: [{type: bulk, duration: 1s}]
`)
	w := up(t, s, "mptcp", labName(t, "core"))
	if w.Host(world.R1) == nil || w.Host(world.R2) == nil {
		t.Fatal("a world with a core has no routers")
	}
	b := &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
		Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201), Proto: traffic.MPTCP, Upload: true, Size: 4 << 20}
	res, err := b.Run(context.Background())
	if err != nil || res.Bytes != 4<<20 {
		t.Fatalf("through the core: %d bytes, %v", res.Bytes, err)
	}
	resp, err := world.Control(w.Dir, world.Request{Op: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	carried := 0
	for _, l := range []string{"core0", "core1"} {
		if resp.Links[l].Up.Stats.Delivered > 0 {
			carried++
		}
	}
	if carried == 0 {
		t.Fatal("no core link carried traffic")
	}
}

func TestFailedUpLeavesNothing(t *testing.T) {
	testutil.RequireLab(t)
	s := parse(t, `
hosts: {client: {cc: nosuchcc}}
paths: [{name: a, rate: 10mbit, delay: 1ms}]
`)
	name := labName(t, "bad")
	plan, err := world.NewPlan(name, s, s.Variant("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	_, err = world.Up(context.Background(), plan, world.Options{Binary: testutil.Binary(t)})
	if err == nil || !strings.Contains(err.Error(), `congestion control "nosuchcc" is not available`) {
		t.Fatalf("err = %v", err)
	}
	left, _ := netnsutil.List(world.NSPrefix + name + "-")
	if len(left) > 0 {
		t.Fatalf("namespaces left behind: %v", left)
	}
	if _, err := os.Stat(filepath.Join(world.StateRoot, name)); err == nil {
		t.Fatal("state directory left behind")
	}
}

func TestNotRootGetsAClearMessage(t *testing.T) {
	testutil.RequireLab(t)
	// The scenario must be readable by nobody: t.TempDir's parent is not.
	dir, err := os.MkdirTemp("", "mpsteer-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	file := filepath.Join(dir, "s.yaml")
	os.WriteFile(file, []byte(twoPaths), 0o644)
	// So must the binary: one built for the tests lies in a directory only
	// root may enter.
	bin, err := os.ReadFile(testutil.Binary(t))
	if err != nil {
		t.Fatal(err)
	}
	exe := filepath.Join(dir, "mpsteer")
	if err := os.WriteFile(exe, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, "lab", "up", file, "--name", labName(t, "nobody"))
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), "the lab needs root") {
		t.Fatalf("as nobody: err=%v output=%q", err, out)
	}
	if left, _ := netnsutil.List(world.NSPrefix + labName(t, "nobody")); len(left) > 0 {
		t.Fatalf("namespaces left behind: %v", left)
	}
}
