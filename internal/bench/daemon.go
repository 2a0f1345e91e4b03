package bench

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
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

func (d *daemon) stop() {
	d.cmd.Process.Signal(syscall.SIGTERM)
	d.cmd.Wait()
	os.RemoveAll(d.dir)
}
