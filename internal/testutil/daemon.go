package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"mpsteer/internal/api"
)

// Daemon is the real mpsteer daemon running in a namespace for a test.
type Daemon struct {
	Cmd    *exec.Cmd
	Client *api.Client
	Log    string
	Socket string
}

// StartDaemon runs `mpsteer daemon` with config inside namespace ns and
// waits until it answers. It is stopped, and its log shown on failure,
// when the test ends.
func StartDaemon(t testing.TB, ns, config string) *Daemon {
	t.Helper()
	dir, err := os.MkdirTemp("", "mpsteer-d")
	if err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "config.yaml")
	os.WriteFile(cfg, []byte(config), 0o644)
	d := &Daemon{Socket: filepath.Join(dir, "d.sock"), Log: filepath.Join(dir, "daemon.log")}
	logf, _ := os.Create(d.Log)
	d.Cmd = exec.Command("ip", "netns", "exec", ns, Binary(t), "daemon", "--config", cfg, "--socket", d.Socket)
	d.Cmd.Stdout, d.Cmd.Stderr = logf, logf
	if err := d.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		d.Cmd.Process.Kill()
		d.Cmd.Wait()
		logf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(d.Log)
			t.Logf("daemon log:\n%s", b)
		}
		os.RemoveAll(dir)
	})
	d.Client = api.NewClient(d.Socket)
	for i := 0; ; i++ {
		if _, err := d.Client.Status(); err == nil {
			return d
		}
		if i > 200 || d.Cmd.ProcessState != nil {
			b, _ := os.ReadFile(d.Log)
			t.Fatalf("daemon did not come up:\n%s", b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
