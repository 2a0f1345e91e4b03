package daemon_test

import (
	"context"
	"fmt"
	"maps"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// world: two veth paths; the client's second address is a subflow
// endpoint; one MPTCP bulk upload can run through it.
type world struct {
	h   testutil.Hosts
	cli *pm.Client
	dir string
}

func newWorld(t *testing.T) *world {
	testutil.RequireLab(t)
	h := testutil.TwoHosts(t, 2)
	w := &world{h: h, dir: t.TempDir()}
	for _, ns := range []string{h.Client, h.Server} {
		c := testutil.DialPM(t, ns)
		if err := c.SetLimits(pm.Limits{AddAddrAccepted: 2, Subflows: 2}); err != nil {
			t.Fatal(err)
		}
		if ns == h.Client {
			w.cli = c
		}
	}
	if _, err := w.cli.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(2), Flags: pm.FlagSubflow}); err != nil {
		t.Fatal(err)
	}
	return w
}

// shapeLinks shapes every client link to rate bit/s (TBF).
func (w *world) shapeLinks(t *testing.T, rate uint64) {
	t.Helper()
	for i := 1; i <= w.h.N; i++ {
		if err := w.h.Shape(i, rate); err != nil {
			t.Fatal(err)
		}
	}
}

// startDaemon runs the real binary in the client namespace.
func (w *world) startDaemon(t *testing.T, config string) *testutil.Daemon {
	t.Helper()
	return testutil.StartDaemon(t, w.h.Client, config)
}

// upload runs an MPTCP bulk upload and returns the bytes acknowledged per
// client address, as the kernel counts them on its subflows.
func (w *world) upload(t *testing.T, d time.Duration, during func()) map[netip.Addr]uint64 {
	t.Helper()
	return w.uploadFrom(t, d, during, netip.Addr{}, 0)
}

// uploadFrom is upload counting only the bytes acknowledged from the
// first sample taken grace or more after one showed a subflow from from
// (invalid: from the start): what a policy does once the path it acts on
// has joined and the daemon has answered, whenever a loaded machine lets
// them (how fast the daemon answers is `mpsteer bench reaction`'s). The
// last half second of the upload is left out: as it stops, over these
// unshaped veths, prefer has been seen calling its path stalled and MPTCP
// sending tens of MB in flight there again over the other path (bytes the
// subflow counts as acknowledged; the receiver drops them as duplicates).
//
// An upload in which a kernel reset a subflow for a data
// mapping it could not match (MPTcpExtDSSNotMatching; Linux 6.18 did so
// to about one join in a hundred over these veths, with no daemon
// running, and its path manager does not join again) is run again, up to
// three times, saying so: the policy under test never saw that path.
func (w *world) uploadFrom(t *testing.T, d time.Duration, during func(), from netip.Addr, grace time.Duration) map[netip.Addr]uint64 {
	t.Helper()
	const attempts = 3
	unmatched := func() (n uint64) {
		for _, ns := range []string{w.h.Client, w.h.Server} {
			n += testutil.MPTCPCounters(t, ns)["DSSNotMatching"]
		}
		return n
	}
	for i := 1; ; i++ {
		before := unmatched()
		acked, joined := w.uploadOnce(t, d, during, from, grace)
		resets := unmatched() - before
		if resets == 0 || i == attempts {
			if !joined {
				t.Fatalf("no subflow from %v joined (uploads: %d; the last saw %d subflow resets for unmatched data mappings)", from, i, resets)
			}
			return acked
		}
		t.Logf("upload %d of %d: a kernel reset %d subflow(s) for a data mapping it could not match (MPTcpExtDSSNotMatching): uploading again", i, attempts, resets)
	}
}

// uploadOnce is one upload of uploadFrom; joined is false when from was
// valid and no subflow from it was seen.
func (w *world) uploadOnce(t *testing.T, d time.Duration, during func(), from netip.Addr, grace time.Duration) (acked map[netip.Addr]uint64, joined bool) {
	t.Helper()
	b := &traffic.Bulk{ClientNS: w.h.Client, ServerNS: w.h.Server, Server: netip.AddrPortFrom(w.h.ServerAddr(1), 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	s := testutil.Sampler(t, w.h.Client)
	acked, base := map[netip.Addr]uint64{}, map[netip.Addr]uint64(nil)
	if !from.IsValid() {
		base = map[netip.Addr]uint64{}
	}
	var joinedAt time.Time
	stop := time.Now().Add(d - 500*time.Millisecond)
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	if during != nil {
		go during()
	}
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			if base == nil {
				return nil, false
			}
			for a := range acked {
				acked[a] -= min(base[a], acked[a])
			}
			return acked, true
		case <-time.After(100 * time.Millisecond):
			if time.Now().After(stop) && base != nil {
				continue
			}
			sfs, _ := s.Subflows()
			for _, sf := range sfs {
				acked[sf.Local.Addr()] = max(acked[sf.Local.Addr()], sf.BytesAcked)
				if joinedAt.IsZero() && sf.Local.Addr() == from {
					joinedAt = time.Now()
				}
			}
			if base == nil && !joinedAt.IsZero() && time.Since(joinedAt) >= grace {
				base = maps.Clone(acked)
			}
		}
	}
}

func share(acked map[netip.Addr]uint64, a netip.Addr) float64 {
	var total uint64
	for _, v := range acked {
		total += v
	}
	if total == 0 {
		return 0
	}
	return float64(acked[a]) / float64(total)
}

func TestPreferSendsTheBytesOverThePreferredPath(t *testing.T) {
	w := newWorld(t)
	// Links of 200 Mbit/s (TBF), as a host's uplinks would be: unshaped,
	// the veths take both CPUs and overflow (retransmission timeouts on
	// the preferred path, which prefer rightly leaves).
	w.shapeLinks(t, 200_000_000)
	c := w.startDaemon(t, "policies: []\n").Client
	// The hint turns the prefer policy on at run time.
	if _, err := c.Prefer(api.PreferRequest{Targets: []string{w.h.Dev(2)}}); err != nil {
		t.Fatal(err)
	}
	acked := w.uploadFrom(t, 3*time.Second, nil, w.h.ClientAddr(2), 500*time.Millisecond)
	if s := share(acked, w.h.ClientAddr(2)); s < 0.9 {
		t.Fatalf("preferred path carried %.0f%% of the bytes from 500 ms after it joined (%v), want ≥ 90%%", s*100, acked)
	}
	st, err := c.Status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Hint) != 1 || st.Policies[0].Name != "prefer" {
		t.Fatalf("status %+v", st)
	}
	// Taking the hint back returns to the kernel's default: both paths.
	if _, err := c.Prefer(api.PreferRequest{Clear: true}); err != nil {
		t.Fatal(err)
	}
	// The daemon gives back the endpoint it added for the first path
	// (its next round; later on a loaded machine).
	testutil.Eventually(t, 5*time.Second, func() error {
		if f, ok := testutil.EndpointFlags(t, w.cli)[w.h.ClientAddr(1)]; ok {
			return fmt.Errorf("the endpoint the daemon added for %v is still there (flags %v) after the hint was cleared", w.h.ClientAddr(1), f)
		}
		return nil
	})
	acked = w.upload(t, 3*time.Second, nil)
	if s := share(acked, w.h.ClientAddr(2)); s > 0.8 || s < 0.2 {
		t.Fatalf("after --clear the second path carried %.0f%%, want both paths in use", s*100)
	}
	// A bad hint is refused with a reason.
	if _, err := c.Prefer(api.PreferRequest{Targets: []string{"nosuchif0"}}); err == nil || !strings.Contains(err.Error(), "neither an address nor an interface") {
		t.Fatalf("bad hint: %v", err)
	}
}

func TestCleanExitUndoesAndKillLeavesMPTCPWorking(t *testing.T) {
	w := newWorld(t)
	before := testutil.EndpointFlags(t, w.cli)
	prefer := "policies:\n  - {name: prefer, paths: [" + w.h.ClientAddr(1).String() + "]}\n"
	d := w.startDaemon(t, prefer)
	w.upload(t, 2*time.Second, nil)
	during := testutil.EndpointFlags(t, w.cli)
	if during[w.h.ClientAddr(2)]&pm.FlagBackup == 0 {
		t.Fatalf("endpoints while preferring path 1: %v, want path 2 backup", during)
	}
	// Clean exit: everything back as it was.
	d.Stop(syscall.SIGTERM)
	if after := testutil.EndpointFlags(t, w.cli); len(after) != len(before) || after[w.h.ClientAddr(2)] != before[w.h.ClientAddr(2)] {
		b, _ := os.ReadFile(d.Log)
		t.Fatalf("after SIGTERM endpoints %v, want %v as before\n%s", after, before, b)
	}

	// Killed: the backup flag stays, yet MPTCP keeps working (a backup path
	// is only avoided while another is usable) ...
	d = w.startDaemon(t, prefer)
	w.upload(t, 1*time.Second, nil)
	d.Stop(syscall.SIGKILL)
	acked := w.upload(t, 2*time.Second, nil)
	if acked[w.h.ClientAddr(1)] == 0 {
		t.Fatalf("no traffic after the daemon was killed: %v", acked)
	}
	// ... and the next daemon undoes what the killed one left.
	d = w.startDaemon(t, "policies: []\n")
	testutil.Eventually(t, 5*time.Second, func() error {
		if after := testutil.EndpointFlags(t, w.cli); after[w.h.ClientAddr(2)] != before[w.h.ClientAddr(2)] || len(after) != len(before) {
			b, _ := os.ReadFile(d.Log)
			return fmt.Errorf("after restart endpoints %v, want %v\n%s", after, before, b)
		}
		return nil
	})
}

func TestPolicyApplyAndSIGHUP(t *testing.T) {
	w := newWorld(t)
	d := w.startDaemon(t, "policies: []\n")
	c := d.Client
	// A broken config is refused and the running one stays.
	bad := filepath.Join(d.Dir, "bad.yaml")
	_, err := c.Apply(api.ApplyRequest{File: bad, Config: "policies: [{name: prefer, k: 0}]"})
	if err == nil || !strings.Contains(err.Error(), bad+":1: policies[0].k") {
		t.Fatalf("bad config: %v", err)
	}
	if st, err := c.Status(); err != nil || len(st.Policies) != 0 || st.Config != d.Config {
		t.Fatalf("after a refused apply: policies %+v, config %s (%v)", st.Policies, st.Config, err)
	}
	// A relative file name is refused: SIGHUP would read another file.
	if _, err := c.Apply(api.ApplyRequest{File: "new.yaml", Config: "policies: []"}); err == nil || !strings.Contains(err.Error(), "not an absolute path") {
		t.Fatalf("relative file: %v", err)
	}
	// policy apply (the CLI, run from another directory) records the
	// absolute path, and SIGHUP reloads that file.
	applied := filepath.Join(d.Dir, "applied.yaml")
	os.WriteFile(applied, []byte("policies: [{name: dynthresh}]\n"), 0o644)
	cli := exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "policy", "apply", "applied.yaml", "--socket", d.Socket)
	cli.Dir = d.Dir
	if out, err := cli.CombinedOutput(); err != nil {
		t.Fatalf("policy apply: %v\n%s", err, out)
	}
	if st, err := c.Status(); err != nil || len(st.Policies) != 1 || st.Policies[0].Name != "dynthresh" || st.Config != applied {
		t.Fatalf("after apply: policies %+v, config %q (want %q) (%v)", st.Policies, st.Config, applied, err)
	}
	os.WriteFile(applied, []byte("policies: [{name: prefer, paths: [veth1]}]\n"), 0o644)
	d.Cmd.Process.Signal(syscall.SIGHUP)
	testutil.Eventually(t, 5*time.Second, func() error {
		st, err := c.Status()
		if err != nil {
			return err
		}
		if len(st.Policies) != 1 || st.Policies[0].Name != "prefer" || st.Config != applied {
			return fmt.Errorf("SIGHUP did not reload the file status shows: policies %+v, config %q", st.Policies, st.Config)
		}
		return nil
	})
}

// A reload leaves what did not change alone: a chain declared the same way
// keeps its id and counters across SIGHUP, a failed apply changes nothing,
// and interval changes in a row never hang the daemon.
func TestReloadKeepsUnchangedChainsAndIsAllOrNothing(t *testing.T) {
	w := newWorld(t)
	chain := "chains:\n  - {dev: veth1, hook: egress, select: 'dst(10.0.0.0/8)', act: count}\n"
	d := w.startDaemon(t, "interval: 100ms\n"+chain)
	chains := func() []datapath.ChainStatus {
		t.Helper()
		var out []datapath.ChainStatus
		if err := d.Client.Do(http.MethodGet, "/v1/chains", nil, &out); err != nil {
			t.Fatal(err)
		}
		return out
	}
	w.upload(t, time.Second, nil)
	before := chains()
	if len(before) != 1 || before[0].Selected == 0 {
		t.Fatalf("chains before: %+v", before)
	}
	// SIGHUP with the file unchanged (interval changes twice on the way,
	// through the API and the signal: neither may block the main loop).
	// Each signal is waited for before the next change: signals that come
	// close together are one reload, and one handled late would reload
	// the file over the changes below.
	backToFile := func(via string) {
		t.Helper()
		testutil.Eventually(t, 5*time.Second, func() error {
			st, err := d.Client.Status()
			if err != nil {
				return fmt.Errorf("daemon does not answer after %s: %v", via, err)
			}
			if st.IntervalMs != 100 {
				return fmt.Errorf("interval %v ms after %s, want the file's 100 ms", st.IntervalMs, via)
			}
			return nil
		})
	}
	for _, interval := range []string{"50ms", "70ms"} {
		if _, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: "interval: " + interval + "\n" + chain}); err != nil {
			t.Fatal(err)
		}
		if st, err := d.Client.Status(); err != nil || st.IntervalMs == 100 {
			t.Fatalf("apply of interval %s: status %v ms (%v)", interval, st.IntervalMs, err)
		}
		d.Cmd.Process.Signal(syscall.SIGHUP)
		backToFile("SIGHUP with interval " + interval + " applied")
	}
	after := chains()
	if len(after) != 1 || after[0].ID != before[0].ID || after[0].Selected < before[0].Selected {
		t.Fatalf("chain after reloads %+v, want id %d and counters ≥ %d (not reset)", after, before[0].ID, before[0].Selected)
	}
	// An apply whose second chain cannot attach changes nothing, and the
	// error names the entry's line.
	badCfg := chain + "  - {dev: nosuch0, hook: ingress, act: count}\n"
	_, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: badCfg})
	if err == nil || !strings.Contains(err.Error(), d.Config+":3: chains[1]") || !strings.Contains(err.Error(), "nosuch0") {
		t.Fatalf("apply with a bad device: %v", err)
	}
	if again := chains(); len(again) != 1 || again[0].ID != before[0].ID || again[0].Selected < after[0].Selected {
		t.Fatalf("chains after a refused apply: %+v", again)
	}
	// A changed chain with a declared id is replaced in place.
	if _, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: fmt.Sprintf("chains:\n  - {id: %d, dev: veth1, hook: egress, select: 'dst(10.1.0.0/16)', act: count}\n", before[0].ID)}); err == nil {
		// The entry without an id was attached under the manager's id;
		// declaring that id with new expressions replaces it.
		if got := chains(); len(got) != 1 || got[0].ID != before[0].ID || got[0].Select != "dst(10.1.0.0/16)" {
			t.Fatalf("after replacing: %+v", got)
		}
	} else {
		t.Fatal(err)
	}
}

// The daemon's own credential check: a non-root peer that gets past the
// socket's mode is told why it is refused.
func TestStatusNeedsRoot(t *testing.T) {
	w := newWorld(t)
	d := w.startDaemon(t, "policies: []\n")
	fi, err := os.Stat(d.Socket)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	// Open the way to the socket for everyone (its directory and every
	// parent), so that only the daemon's check stands in the way.
	os.Chmod(d.Dir, 0o755)
	for dir := filepath.Dir(d.Socket); dir != "/"; dir = filepath.Dir(dir) {
		if fi, err := os.Stat(dir); err == nil && fi.Mode().Perm()&0o001 == 0 {
			t.Fatalf("%s is not searchable by others; the test needs a world-searchable path", dir)
		}
	}
	os.Chmod(d.Socket, 0o666)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", testutil.Binary(t), "status", "--socket", d.Socket).CombinedOutput()
	if err == nil {
		t.Fatalf("status as nobody succeeded: %s", out)
	}
	if !strings.Contains(string(out), "answers root only") || !strings.Contains(string(out), "uid 65534") {
		t.Fatalf("status as nobody: %v: %s (want the daemon's refusal naming the uid)", err, out)
	}
	// Root gets through the same socket.
	if _, err := d.Client.Status(); err != nil {
		t.Fatal(err)
	}
}

// One daemon per network namespace: without --socket, the CLI in another
// namespace does not reach this one.
func TestDefaultSocketIsPerNamespace(t *testing.T) {
	w := newWorld(t)
	cfg := filepath.Join(t.TempDir(), "c.yaml")
	os.WriteFile(cfg, []byte("policies: []\n"), 0o644)
	cmd := exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "daemon", "--config", cfg)
	var log strings.Builder
	cmd.Stdout, cmd.Stderr = &log, &log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-done
		if t.Failed() {
			t.Logf("daemon log:\n%s", log.String())
		}
	})
	status := func(ns string) (string, error) {
		out, err := exec.Command("ip", "netns", "exec", ns, testutil.Binary(t), "status").CombinedOutput()
		return string(out), err
	}
	testutil.Eventually(t, 10*time.Second, func() error {
		out, err := status(w.h.Client)
		if err != nil || !strings.Contains(out, "netns "+w.h.Client) {
			return fmt.Errorf("status in the daemon's namespace: %v\n%s", err, out)
		}
		return nil
	})
	out, err := status(w.h.Server)
	if err == nil || !strings.Contains(out, "no mpsteer daemon is listening") {
		t.Fatalf("status from another namespace reached a daemon: %v\n%s", err, out)
	}
}

// `prefer --clear` takes the user's hint back: the config's own prefer
// policy returns to the paths it names, it does not lose them.
func TestPreferClearKeepsTheConfigPaths(t *testing.T) {
	w := newWorld(t)
	c := w.startDaemon(t, "policies: [{name: prefer, paths: ["+w.h.Dev(1)+"]}]\n").Client
	// The prefer policy's targets in status (refreshed by the next
	// decision round) are want alone.
	targets := func(want string) error {
		st, err := c.Status()
		if err != nil {
			return err
		}
		if len(st.Policies) != 1 {
			return fmt.Errorf("policies %+v, want prefer alone", st.Policies)
		}
		m, _ := st.Policies[0].Status.(map[string]any)
		if tg, _ := m["targets"].([]any); len(tg) != 1 || tg[0] != want {
			return fmt.Errorf("prefer's targets %v, want [%s]", tg, want)
		}
		return nil
	}
	if _, err := c.Prefer(api.PreferRequest{Targets: []string{w.h.Dev(2)}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() error { return targets(w.h.Dev(2)) })
	r, err := c.Prefer(api.PreferRequest{Clear: true})
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(r.Message, w.h.Dev(1)) {
		t.Fatalf("--clear answered %q; want it to name the config's %s", r.Message, w.h.Dev(1))
	}
	testutil.Eventually(t, 5*time.Second, func() error { return targets(w.h.Dev(1)) })
}

func TestShapedPoliciesJoinSubflowsAsBackup(t *testing.T) {
	// dynthresh (shaped) wants new subflows to carry nothing before it has
	// seen them: the endpoint that opens them is backup while it runs; a
	// near path (two equal veths) enters at once and carries; a clean
	// exit gives the endpoint back as it was.
	w := newWorld(t)
	// Links of 200 Mbit/s (TBF): over unshaped veths the first subflow
	// never fills its window, MPTCP's scheduler gave the joiner nothing
	// for its first 150 ms in one CI run, and dynthresh rightly set it
	// aside as carrying nothing.
	w.shapeLinks(t, 200_000_000)
	before := testutil.EndpointFlags(t, w.cli)
	d := w.startDaemon(t, "policies: [{name: dynthresh}]\n")
	testutil.Eventually(t, 5*time.Second, func() error {
		if eps := testutil.EndpointFlags(t, w.cli); eps[w.h.ClientAddr(2)]&pm.FlagBackup == 0 {
			return fmt.Errorf("endpoints %v: the second path's is not backup while dynthresh runs", eps)
		}
		return nil
	})
	// What the daemon says once the second subflow has joined, shown if
	// the test fails.
	during := make(chan []byte, 1)
	acked := w.upload(t, 2*time.Second, func() {
		testutil.WaitFor(2*time.Second, func() error {
			st, err := d.Client.Status()
			if err != nil {
				return err
			}
			for _, sf := range subflowsOf(st) {
				if strings.HasPrefix(sf.Local, w.h.ClientAddr(2).String()+":") {
					return nil
				}
			}
			return fmt.Errorf("no subflow from %v yet", w.h.ClientAddr(2))
		})
		out, _ := exec.Command(testutil.Binary(t), "status", "--json", "--socket", d.Socket).CombinedOutput()
		during <- out
	})
	if s := share(acked, w.h.ClientAddr(2)); s < 0.1 {
		b, _ := os.ReadFile(d.Log)
		select {
		case out := <-during:
			t.Logf("status during the upload: %s", out)
		default:
		}
		t.Fatalf("the second (equal) path carried %.0f%% of the bytes (%v), want it let in\n%s", s*100, acked, b)
	}
	d.Stop(syscall.SIGTERM)
	if after := testutil.EndpointFlags(t, w.cli); after[w.h.ClientAddr(2)] != before[w.h.ClientAddr(2)] {
		t.Fatalf("after SIGTERM endpoints %v, want %v as before", after, before)
	}
}
