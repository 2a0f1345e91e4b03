package daemon_test

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/testutil"
)

// Defect 7 of the reconciler issue: the crash state's save and load
// errors were swallowed, so a daemon that could not keep what it changed
// said nothing (a crash would leave changes no daemon undoes). A state
// file that cannot be read is said at start, and one that cannot be
// written shows in status, naming the file.
func TestCrashStateErrorsAreSaid(t *testing.T) {
	w := newWorld(t)
	// A file where the state directory should be: nothing can be written.
	blocker := filepath.Join(t.TempDir(), "run")
	if err := os.WriteFile(blocker, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The initial subflow's address has no endpoint: making it backup
	// makes the daemon create one, which it must keep in its state.
	d := testutil.StartDaemonWith(t, w.h.Client, fmt.Sprintf("policies: [{name: backup, paths: [%s]}]\n", w.h.ClientAddr(1)),
		"--state-dir", blocker)
	c := d.Client
	// While an upload runs (the daemon creates the endpoint then).
	u := startUploadIn(t, w.h.Client, w.h.Server, netip.AddrPortFrom(w.h.ServerAddr(1), 5201))
	testutil.Eventually(t, 5*time.Second, func() error {
		st, err := c.Status()
		if err != nil {
			return err
		}
		if !strings.Contains(st.StateError, blocker) {
			return fmt.Errorf("state_error %q, want one naming %s", st.StateError, blocker)
		}
		return nil
	})
	u.stop()
}

// A state file that cannot be parsed is said at start (and in status),
// not taken for an empty state.
func TestCorruptStateIsSaidAtStart(t *testing.T) {
	w := newWorld(t)
	dir := t.TempDir()
	d := testutil.StartDaemonWith(t, w.h.Client, "policies: []\n", "--state-dir", dir)
	s, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	file := s.StateFile
	d.Stop(os.Interrupt)
	if !strings.HasPrefix(file, dir) {
		t.Fatalf("state file %q, want one in %s", file, dir)
	}
	if err := os.WriteFile(file, []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	d = testutil.StartDaemonWith(t, w.h.Client, "policies: []\n", "--state-dir", dir)
	if s, err = d.Client.Status(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(s.StateError, file) || !strings.Contains(s.StateError, "not valid") {
		t.Fatalf("state_error %q, want the corrupt file named", s.StateError)
	}
}

// Defect 8 of the reconciler issue: the health loop read the report map
// every 5 ms under the daemon's lock whenever notsent_lowat was set
// (prefer sets it), and nothing read the reports. The poller runs only
// while a policy reads reports or a last-hop source feeds them.
func TestHealthIsPolledOnlyWhenSomethingReadsIt(t *testing.T) {
	w := newWorld(t)
	d := testutil.StartDaemon(t, w.h.Client, fmt.Sprintf("policies: [{name: prefer, paths: [%s], notsent_lowat: 16KiB}]\n", w.h.Dev(1)))
	var st *api.Status
	testutil.Eventually(t, 5*time.Second, func() error {
		var err error
		if st, err = d.Client.Status(); err != nil {
			return err
		}
		if st.Health == nil || st.Health.Program == nil || st.Loop == nil || st.Loop.Rounds < 10 {
			return fmt.Errorf("the health program (notsent_lowat) is not loaded yet, or fewer than 10 rounds ran: health %+v loop %+v", st.Health, st.Loop)
		}
		return nil
	})
	if st.Loop.HealthPolls != 0 {
		t.Fatalf("prefer alone: the reports were polled %d times; nothing reads them", st.Loop.HealthPolls)
	}
	// A policy that reads them: polled.
	if _, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: "policies: [{name: ramptcp}]\n"}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		if st.Loop.HealthPolls == 0 {
			return errors.New("ramptcp reads the reports, and they are not polled")
		}
		return nil
	})
}

// A config whose policy entry carries a key the policy does not use is
// refused by `mpsteer daemon --config` and by `mpsteer policy apply`,
// naming the file, the line and the key.
func TestUnusedKeysAreRefusedByTheCommands(t *testing.T) {
	w := newWorld(t)
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("policies:\n  - name: prefer\n    paths: [eth0]\n    colour: blue\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	want := bad + ":4: policies[0].colour: unknown key"
	out, err := exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "daemon", "--config", bad,
		"--socket", filepath.Join(t.TempDir(), "d.sock")).CombinedOutput()
	if err == nil || !strings.Contains(string(out), want) {
		t.Fatalf("daemon --config: err %v, output %q, want %q", err, out, want)
	}
	d := testutil.StartDaemon(t, w.h.Client, "policies: []\n")
	out, err = exec.Command("ip", "netns", "exec", w.h.Client, testutil.Binary(t), "policy", "apply", bad, "--socket", d.Socket).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "bad.yaml:4: policies[0].colour: unknown key") {
		t.Fatalf("policy apply: err %v, output %q", err, out)
	}
}
