package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// On a real host others manage MPTCP endpoints too: NetworkManager (1.40
// and later) adds and removes them as interfaces come and go, mptcpd's
// plugins add them, an administrator runs `ip mptcp endpoint`. mpsteer
// changes only the endpoints whose address a policy decides on; what
// others do elsewhere stays as they did it, and a flag another manager
// flips is reported once, not fought. These tests run mpsteer beside such
// managers and check that neither undoes the other's work.

// threePaths is a client with three addresses, a connection that keeps
// subflows on all of them while the test runs, and a path-manager client
// that acts as the other manager.
type threePaths struct {
	h     testutil.Hosts
	other *pm.Client
	stop  func()
}

func newThreePaths(t *testing.T) *threePaths {
	testutil.RequireLab(t)
	h := testutil.TwoHosts(t, 3)
	for _, ns := range []string{h.Client, h.Server} {
		if err := testutil.DialPM(t, ns).SetLimits(pm.Limits{AddAddrAccepted: 4, Subflows: 4}); err != nil {
			t.Fatal(err)
		}
	}
	return &threePaths{h: h, other: testutil.DialPM(t, h.Client)}
}

// connect keeps an MPTCP upload running until the test ends; the kernel
// opens its subflows from the endpoints there are then.
func (w *threePaths) connect(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	b := &traffic.Bulk{ClientNS: w.h.Client, ServerNS: w.h.Server, Server: netip.AddrPortFrom(w.h.ServerAddr(1), 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: time.Minute}
	go func() { defer close(done); b.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
}

func (w *threePaths) endpoint(t *testing.T, a netip.Addr) (pm.Endpoint, bool) {
	t.Helper()
	eps, err := w.other.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range eps {
		if e.Addr == a {
			return e, true
		}
	}
	return pm.Endpoint{}, false
}

// flagsBecome waits until a's endpoint has exactly flags.
func (w *threePaths) flagsBecome(t *testing.T, a netip.Addr, flags pm.Flags) {
	t.Helper()
	testutil.Eventually(t, 10*time.Second, func() error {
		e, ok := w.endpoint(t, a)
		if !ok {
			return fmt.Errorf("%s has no endpoint", a)
		}
		if e.Flags != flags {
			return fmt.Errorf("%s's endpoint has flags %q, want %q", a, e.Flags, flags)
		}
		return nil
	})
}

// flagsStay checks a's endpoint keeps flags over n of the daemon's rounds.
func (w *threePaths) flagsStay(t *testing.T, d *testutil.Daemon, a netip.Addr, flags pm.Flags, rounds uint64) {
	t.Helper()
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	until := st.Loop.Rounds + rounds
	testutil.Eventually(t, 20*time.Second, func() error {
		e, ok := w.endpoint(t, a)
		if !ok || e.Flags != flags {
			t.Fatalf("%s's endpoint changed to %q (present %v), want %q kept", a, e.Flags, ok, flags)
		}
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		if st.Loop.Rounds < until {
			return fmt.Errorf("%d rounds of %d", st.Loop.Rounds, until)
		}
		return nil
	})
}

// Beside a NetworkManager-like manager (endpoints added and removed as
// interfaces come and go, an administrator's flag change): mpsteer makes
// the address its policy decides on backup; it never touches the other
// manager's other endpoints; a flag the other manager flips is yielded to,
// reported once; an endpoint the other manager replaces gets mpsteer's
// decision once; on exit only what is still mpsteer's goes back.
func TestBesideANetworkManagerLikeManager(t *testing.T) {
	w := newThreePaths(t)
	a2, a3 := w.h.ClientAddr(2), w.h.ClientAddr(3)
	// The other manager's endpoints, as NetworkManager's
	// connection.mptcp-flags=subflow makes them.
	for _, a := range []netip.Addr{a2, a3} {
		if _, err := w.other.AddEndpoint(pm.Endpoint{Addr: a, Flags: pm.FlagSubflow}); err != nil {
			t.Fatal(err)
		}
	}
	w.connect(t)
	d := testutil.StartDaemon(t, w.h.Client, fmt.Sprintf("policies: [{name: backup, paths: [%s]}]\n", a2))
	w.flagsBecome(t, a2, pm.FlagSubflow|pm.FlagBackup)
	w.flagsStay(t, d, a3, pm.FlagSubflow, 5)

	// An administrator takes the backup flag off: mpsteer yields, once.
	e2, _ := w.endpoint(t, a2)
	if err := w.other.SetEndpointFlags(pm.Endpoint{ID: e2.ID, Addr: a2, Flags: pm.FlagSubflow}); err != nil {
		t.Fatal(err)
	}
	w.flagsStay(t, d, a2, pm.FlagSubflow, 20)
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	yielded := 0
	for _, r := range st.Actions {
		if r.Result == "yielded" && strings.Contains(r.Target, a2.String()) {
			yielded++
		}
	}
	if yielded != 1 {
		t.Fatalf("the conflict on %s was reported %d times, want once: %+v", a2, yielded, st.Actions)
	}

	// The interface of a3 goes and comes back: the other manager removes
	// its endpoint and adds a new one. Not mpsteer's: left as it is.
	e3, _ := w.endpoint(t, a3)
	if err := w.other.DelEndpoint(e3); err != nil {
		t.Fatal(err)
	}
	if _, err := w.other.AddEndpoint(pm.Endpoint{Addr: a3, Flags: pm.FlagSubflow | pm.FlagFullmesh}); err != nil {
		t.Fatal(err)
	}
	w.flagsStay(t, d, a3, pm.FlagSubflow|pm.FlagFullmesh, 5)
	// The interface of a2 goes and comes back: a new endpoint, which
	// gets mpsteer's decision once its subflows are there again.
	if err := w.other.DelEndpoint(pm.Endpoint{ID: e2.ID, Addr: a2}); err != nil {
		t.Fatal(err)
	}
	if _, err := w.other.AddEndpoint(pm.Endpoint{Addr: a2, Flags: pm.FlagSubflow}); err != nil {
		t.Fatal(err)
	}
	w.flagsBecome(t, a2, pm.FlagSubflow|pm.FlagBackup)

	// On exit mpsteer restores what is still what it set, nothing else.
	d.Stop(syscall.SIGTERM)
	w.flagsBecome(t, a2, pm.FlagSubflow)
	if e, ok := w.endpoint(t, a3); !ok || e.Flags != pm.FlagSubflow|pm.FlagFullmesh {
		t.Fatalf("after mpsteer exited, the other manager's endpoint for %s is %q (present %v)", a3, e.Flags, ok)
	}
}

// Beside mptcpd (Debian's package; its addr_adv plugin adds an endpoint
// for every address of the host, under the kernel path manager): mptcpd's
// endpoints all stay, mpsteer sets its decision on the one its policy
// names and gives it back on exit, and mptcpd does not undo it.
func TestBesideMptcpd(t *testing.T) {
	const mptcpd = "/usr/libexec/mptcpd"
	if _, err := os.Stat(mptcpd); err != nil {
		testutil.Unavailable(t, "mptcpd is not installed ("+mptcpd+"; make deps installs Debian's mptcpd)")
	}
	dirs, _ := filepath.Glob("/usr/lib/*/mptcpd")
	if len(dirs) == 0 {
		testutil.Unavailable(t, "mptcpd's plugins are not installed (Debian's mptcpd-plugins)")
	}
	w := newThreePaths(t)
	a2, a3 := w.h.ClientAddr(2), w.h.ClientAddr(3)
	logf := filepath.Join(t.TempDir(), "mptcpd.log")
	lf, err := os.Create(logf)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("ip", "netns", "exec", w.h.Client, mptcpd, "--plugin-dir="+dirs[0], "--path-manager=addr_adv",
		"--load-plugins=addr_adv", "--addr-flags=subflow", "--notify-flags=existing,skip_link_local,skip_loopback", "--log=stderr", "--debug")
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		<-exited
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logf)
			t.Logf("mptcpd log:\n%s", b)
		}
	})
	// mptcpd adds an endpoint for each address.
	testutil.Eventually(t, 10*time.Second, func() error {
		for _, a := range []netip.Addr{w.h.ClientAddr(1), a2, a3} {
			if _, ok := w.endpoint(t, a); !ok {
				return errors.New("mptcpd has not added an endpoint for " + a.String())
			}
		}
		return nil
	})
	before := map[netip.Addr]pm.Endpoint{}
	for _, a := range []netip.Addr{w.h.ClientAddr(1), a2, a3} {
		before[a], _ = w.endpoint(t, a)
	}
	w.connect(t)
	d := testutil.StartDaemon(t, w.h.Client, fmt.Sprintf("policies: [{name: backup, paths: [%s]}]\n", a2))
	w.flagsBecome(t, a2, before[a2].Flags|pm.FlagBackup)
	w.flagsStay(t, d, a2, before[a2].Flags|pm.FlagBackup, 20) // mptcpd leaves it
	for _, a := range []netip.Addr{w.h.ClientAddr(1), a3} {
		if e, _ := w.endpoint(t, a); e != before[a] {
			t.Fatalf("mptcpd's endpoint for %s changed: %+v, was %+v", a, e, before[a])
		}
	}
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range st.Endpoints {
		if e.Owned {
			t.Fatalf("mpsteer created an endpoint (%+v) where mptcpd's was there to use", e)
		}
	}
	d.Stop(syscall.SIGTERM)
	for a, e := range before {
		w.flagsBecome(t, a, e.Flags)
	}
	if n := countEndpoints(t, w.other); n != 3 {
		t.Fatalf("%d endpoints after mpsteer exited, want mptcpd's 3", n)
	}
}

func countEndpoints(t *testing.T, c *pm.Client) int {
	t.Helper()
	eps, err := c.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	return len(eps)
}
