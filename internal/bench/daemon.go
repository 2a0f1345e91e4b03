package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"mpsteer/internal/api"
)

// daemon is the real mpsteer daemon binary, run in a namespace.
type daemon struct {
	client *api.Client
	socket string
	dir    string
	cmd    *exec.Cmd
	log    string
}

// startDaemon runs `mpsteer daemon` in ns with config and waits until its
// API answers. stop ends it and removes its files.
func startDaemon(binary, ns, config string) (*daemon, error) {
	dir, err := os.MkdirTemp("", "mpsteer-bench")
	if err != nil {
		return nil, err
	}
	d := &daemon{dir: dir, socket: filepath.Join(dir, "d.sock")}
	cfg := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(cfg, []byte(config), 0o644); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "daemon.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	defer logf.Close()
	d.log = logf.Name()
	d.cmd = exec.Command("ip", "netns", "exec", ns, binary, "daemon", "--config", cfg, "--socket", d.socket)
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	d.client = api.NewClient(d.socket)
	for i := 0; ; i++ {
		if _, err := d.client.Status(); err == nil {
			return d, nil
		}
		if i > 200 {
			log, _ := os.ReadFile(logf.Name())
			d.stop()
			return nil, fmt.Errorf("the daemon did not answer within 10 s: %s", log)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// explain says what the daemon did last, for an error: its last actions
// and the end of its log (which stop removes).
func (d *daemon) explain() string {
	var b strings.Builder
	if st, err := d.client.Status(); err == nil {
		acts := st.Actions
		if len(acts) > 8 {
			acts = acts[len(acts)-8:]
		}
		for _, a := range acts {
			fmt.Fprintf(&b, "\n  action: %s %s %s: %s %s", a.At.Format("15:04:05.000000"), a.Kind, a.Target, a.Result, a.Error)
		}
	} else {
		fmt.Fprintf(&b, "\n  status: %v", err)
	}
	if log, err := os.ReadFile(d.log); err == nil {
		lines := strings.Split(strings.TrimSpace(string(log)), "\n")
		if len(lines) > 15 {
			lines = lines[len(lines)-15:]
		}
		fmt.Fprintf(&b, "\n  the daemon's log ends:\n    %s", strings.Join(lines, "\n    "))
	}
	return b.String()
}

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	os.RemoveAll(d.dir)
}
