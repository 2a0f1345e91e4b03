package testutil

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/timescale"
)

// Daemon is the real mpsteer daemon running in a namespace for a test.
type Daemon struct {
	Cmd    *exec.Cmd
	Client *api.Client
	Dir    string // its own directory: config, socket, log
	Config string // the config file it was started with
	Log    string
	Socket string
	exited chan struct{}
}

// StartDaemon runs `mpsteer daemon` with config inside namespace ns and
// waits until it answers. It is stopped, and its log shown on failure,
// when the test ends.
func StartDaemon(t testing.TB, ns, config string) *Daemon {
	t.Helper()
	return StartDaemonWith(t, ns, config)
}

// StartDaemonWith is StartDaemon with more of the daemon's flags (e.g.
// "--metrics", "127.0.0.1:9900").
func StartDaemonWith(t testing.TB, ns, config string, flags ...string) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "mpsteer-d")
	if err != nil {
		t.Fatal(err)
	}
	d := &Daemon{Dir: dir, Config: filepath.Join(dir, "config.yaml"), Socket: filepath.Join(dir, "d.sock"), Log: filepath.Join(dir, "daemon.log")}
	if err := os.WriteFile(d.Config, []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	d.Cmd = exec.Command("ip", append([]string{"netns", "exec", ns, Binary(t), "daemon", "--config", d.Config, "--socket", d.Socket}, flags...)...)
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	d.exited = exited
	go func() { d.Cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		// A clean exit: the daemon undoes what it changed and removes
		// its state file (a killed one leaves both to the next daemon
		// in its namespace, and there is none).
		d.Cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			d.Cmd.Process.Kill()
			<-exited
		}
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(d.Log)
			t.Logf("daemon log:\n%s", b)
		}
		os.RemoveAll(dir)
	})
	d.Client = api.NewClient(d.Socket)
	wait := timescale.Scaled(10 * time.Second)
	deadline := time.Now().Add(wait)
	for {
		if _, err := d.Client.Status(); err == nil {
			return d
		}
		select {
		case <-exited:
			b, _ := os.ReadFile(d.Log)
			t.Fatalf("daemon exited before it answered:\n%s", b)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(d.Log)
			t.Fatalf("daemon did not answer within %v:\n%s", wait, b)
		}
	}
}

// Stop sends sig and waits for the daemon to exit (killing it after 10s).
func (d *Daemon) Stop(sig os.Signal) {
	d.Cmd.Process.Signal(sig)
	select {
	case <-d.exited:
	case <-time.After(10 * time.Second):
		d.Cmd.Process.Kill()
		<-d.exited
	}
}

// Exited reports whether the daemon process has ended.
func (d *Daemon) Exited() bool {
	select {
	case <-d.exited:
		return true
	default:
		return false
	}
}

// Rounds is the number of rounds the daemon's reconcile loop has run
// (status loop.rounds).
func (d *Daemon) Rounds(t testing.TB) uint64 {
	t.Helper()
	st, err := d.Client.Status()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Loop == nil {
		t.Fatalf("status has no loop section: is %s an older mpsteer?", Binary(t))
	}
	return st.Loop.Rounds
}

// WaitRounds waits until the daemon's reconcile loop has run n more
// rounds: the daemon has had n chances to act on what it sees (a test that
// checks it did not act waits for them, never for a guessed time).
func (d *Daemon) WaitRounds(t testing.TB, n uint64) {
	t.Helper()
	from := d.Rounds(t)
	// A round runs at least every sampling interval (default 100 ms);
	// a loaded machine stretches it.
	Eventually(t, time.Duration(n)*time.Second+10*time.Second, func() error {
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		if st.Loop == nil || st.Loop.Rounds < from+n {
			return fmt.Errorf("the daemon ran %d of %d rounds", roundsSince(st, from), n)
		}
		return nil
	})
}

func roundsSince(st *api.Status, from uint64) uint64 {
	if st.Loop == nil || st.Loop.Rounds < from {
		return 0
	}
	return st.Loop.Rounds - from
}
