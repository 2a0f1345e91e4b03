package daemon_test

import (
	"context"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/daemon"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
	"mpsteer/internal/testutil"
)

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"policies: []":  "",
		"interval: 100": `c.yaml:1: interval: duration "100" has no unit`,
		"policies: [{name: prefer, colour: blue}]":      `c.yaml:1: policies[0].colour: unknown key "colour"`,
		"policies:\n  - name: prefer\n  - name: prefer": `c.yaml:3: policies[1].name: policy "prefer" is listed twice`,
		"backup_via: magic":                             `backup_via: "magic" is not valid (valid: auto, endpoint, subflow)`,
		"persist: bpf/state":                            `persist: "bpf/state" is not an absolute path`,
		"polices: []":                                   `unknown key "polices"`,
	}
	for src, want := range cases {
		_, err := daemon.ParseConfig("c.yaml", []byte(src), policy.Env{})
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

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
		c := dial(t, ns)
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

func dial(t *testing.T, ns string) *pm.Client {
	c, err := pm.Dial(pm.Options{NetNSName: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startDaemon runs the real binary in the client namespace.
func (w *world) startDaemon(t *testing.T, config string) (*exec.Cmd, *api.Client, string) {
	t.Helper()
	cfg := filepath.Join(w.dir, "config.yaml")
	os.WriteFile(cfg, []byte(config), 0o644)
	sock := filepath.Join(w.dir, "d.sock")
	logFile := filepath.Join(w.dir, "daemon.log")
	logf, _ := os.Create(logFile)
	cmd := exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "daemon", "--config", cfg, "--socket", sock)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logFile)
			t.Logf("daemon log:\n%s", b)
		}
	})
	c := api.NewClient(sock)
	for i := 0; ; i++ {
		if _, err := c.Status(); err == nil {
			break
		}
		if i > 100 {
			b, _ := os.ReadFile(logFile)
			t.Fatalf("daemon did not come up:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return cmd, c, logFile
}

// upload runs an MPTCP bulk upload and returns the bytes acknowledged per
// client address, as the kernel counts them on its subflows.
func (w *world) upload(t *testing.T, d time.Duration, during func()) map[netip.Addr]uint64 {
	t.Helper()
	b := &traffic.Bulk{ClientNS: w.h.Client, ServerNS: w.h.Server, Server: netip.AddrPortFrom(w.h.ServerAddr(1), 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	h, _ := netnsutil.Open(w.h.Client)
	defer h.Close()
	s, err := observe.NewSampler(int(h))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	acked := map[netip.Addr]uint64{}
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
			return acked
		case <-time.After(100 * time.Millisecond):
			sfs, _ := s.Subflows()
			for _, sf := range sfs {
				acked[sf.Local.Addr()] = max(acked[sf.Local.Addr()], sf.BytesAcked)
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
	_, c, _ := w.startDaemon(t, "policies: []\n")
	// The hint turns the prefer policy on at run time.
	if _, err := c.Prefer(api.PreferRequest{Targets: []string{w.h.Dev(2)}}); err != nil {
		t.Fatal(err)
	}
	acked := w.upload(t, 3*time.Second, nil)
	if s := share(acked, w.h.ClientAddr(2)); s < 0.9 {
		t.Fatalf("preferred path carried %.0f%% of the bytes (%v), want ≥ 90%%", s*100, acked)
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
	time.Sleep(300 * time.Millisecond)
	acked = w.upload(t, 3*time.Second, nil)
	if s := share(acked, w.h.ClientAddr(2)); s > 0.8 || s < 0.2 {
		t.Fatalf("after --clear the second path carried %.0f%%, want both paths in use", s*100)
	}
	// A bad hint is refused with a reason.
	if _, err := c.Prefer(api.PreferRequest{Targets: []string{"nosuchif0"}}); err == nil || !strings.Contains(err.Error(), "neither an address nor an interface") {
		t.Fatalf("bad hint: %v", err)
	}
}

func endpointFlags(t *testing.T, c *pm.Client) map[netip.Addr]pm.Flags {
	eps, err := c.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]pm.Flags{}
	for _, e := range eps {
		out[e.Addr] = e.Flags
	}
	return out
}

func TestCleanExitUndoesAndKillLeavesMPTCPWorking(t *testing.T) {
	w := newWorld(t)
	before := endpointFlags(t, w.cli)
	prefer := "policies:\n  - {name: prefer, paths: [" + w.h.ClientAddr(1).String() + "]}\n"
	cmd, _, logFile := w.startDaemon(t, prefer)
	w.upload(t, 2*time.Second, nil)
	during := endpointFlags(t, w.cli)
	if during[w.h.ClientAddr(2)]&pm.FlagBackup == 0 {
		t.Fatalf("endpoints while preferring path 1: %v, want path 2 backup", during)
	}
	// Clean exit: everything back as it was.
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	if after := endpointFlags(t, w.cli); len(after) != len(before) || after[w.h.ClientAddr(2)] != before[w.h.ClientAddr(2)] {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("after SIGTERM endpoints %v, want %v as before\n%s", after, before, b)
	}

	// Killed: the backup flag stays, yet MPTCP keeps working (a backup path
	// is only avoided while another is usable) ...
	cmd, _, _ = w.startDaemon(t, prefer)
	w.upload(t, 1*time.Second, nil)
	cmd.Process.Kill()
	cmd.Wait()
	acked := w.upload(t, 2*time.Second, nil)
	if acked[w.h.ClientAddr(1)] == 0 {
		t.Fatalf("no traffic after the daemon was killed: %v", acked)
	}
	// ... and the next daemon undoes what the killed one left.
	_, _, logFile = w.startDaemon(t, "policies: []\n")
	time.Sleep(300 * time.Millisecond)
	if after := endpointFlags(t, w.cli); after[w.h.ClientAddr(2)] != before[w.h.ClientAddr(2)] || len(after) != len(before) {
		b, _ := os.ReadFile(logFile)
		t.Fatalf("after restart endpoints %v, want %v\n%s", after, before, b)
	}
}

func TestPolicyApplyAndSIGHUP(t *testing.T) {
	w := newWorld(t)
	cmd, c, _ := w.startDaemon(t, "policies: []\n")
	cfg := filepath.Join(w.dir, "config.yaml")
	// A broken config is refused and the running one stays.
	_, err := c.Apply(api.ApplyRequest{File: "new.yaml", Config: "policies: [{name: prefer, k: 0}]"})
	if err == nil || !strings.Contains(err.Error(), "new.yaml:1: policies[0].k") {
		t.Fatalf("bad config: %v", err)
	}
	if st, _ := c.Status(); len(st.Policies) != 0 {
		t.Fatalf("policies after a refused apply: %+v", st.Policies)
	}
	if _, err := c.Apply(api.ApplyRequest{File: "new.yaml", Config: "policies: [{name: dynthresh}]"}); err != nil {
		t.Fatal(err)
	}
	if st, _ := c.Status(); len(st.Policies) != 1 || st.Policies[0].Name != "dynthresh" {
		t.Fatalf("after apply: %+v", st.Policies)
	}
	// SIGHUP re-reads the file given at start.
	os.WriteFile(cfg, []byte("policies: [{name: prefer, paths: [veth1]}]\n"), 0o644)
	cmd.Process.Signal(syscall.SIGHUP)
	for i := 0; i < 50; i++ {
		if st, _ := c.Status(); len(st.Policies) == 1 && st.Policies[0].Name == "prefer" {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatal("SIGHUP did not load the new config")
}

func TestStatusNeedsRoot(t *testing.T) {
	w := newWorld(t)
	_, _, _ = w.startDaemon(t, "policies: []\n")
	sock := filepath.Join(w.dir, "d.sock")
	fi, err := os.Stat(sock)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("socket mode %v, want 0600", fi.Mode().Perm())
	}
	// Even past the file mode, a non-root peer is turned away.
	os.Chmod(sock, 0o666)
	os.Chmod(w.dir, 0o755)
	out, err := exec.Command("setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", testutil.Binary(t), "status", "--socket", sock).CombinedOutput()
	if err == nil {
		t.Fatalf("status as nobody succeeded: %s", out)
	}
}
