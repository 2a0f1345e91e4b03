package runner

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"mpsteer/internal/api"
)

// startDaemons starts `mpsteer daemon` in the hosts that the variant
// configures (the same binary a user runs), waits until each answers on
// its socket, and returns a function that stops them and reports their
// last status.
func (r *variantRun) startDaemons(ctx context.Context) (func() map[string]any, error) {
	if len(r.v.Daemon) == 0 {
		return func() map[string]any { return nil }, nil
	}
	bin := r.o.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	type running struct {
		cmd    *exec.Cmd
		socket string
		log    string
		done   chan error
	}
	procs := map[string]*running{}
	// Stopping also tells whether each daemon lasted the run: one that
	// exited by itself, or stopped answering, fails the run.
	stop := func() map[string]any {
		out := map[string]any{}
		for host, p := range procs {
			select {
			case err := <-p.done:
				p.done <- err
				r.fail(fmt.Sprintf("daemon in %s exited during the run (%v)%s", host, err, lastLogLine(p.log)))
				continue
			default:
			}
			if st, err := api.NewClient(p.socket).Status(); err == nil {
				out[host] = st
			} else {
				r.fail(fmt.Sprintf("daemon in %s did not answer at the end of the run: %v", host, err))
			}
			p.cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.done:
			case <-time.After(5 * time.Second):
				p.cmd.Process.Kill()
				<-p.done
			}
		}
		procs = map[string]*running{}
		return out
	}
	for host, cfg := range r.v.Daemon {
		cfgFile := filepath.Join(r.dir, "daemon-"+host+".yaml")
		if err := os.WriteFile(cfgFile, cfg, 0o644); err != nil {
			stop()
			return nil, err
		}
		// Unix socket paths are short (108 bytes): keep them in the lab's
		// state directory.
		socket := filepath.Join(r.w.Dir, "daemon-"+host+".sock")
		logf, err := os.Create(filepath.Join(r.dir, "daemon-"+host+".log"))
		if err != nil {
			stop()
			return nil, err
		}
		// client and server are the measured pair's hosts (in a tenants
		// world, VMs); other names are hosts of the world.
		cmd, err := r.w.Command(r.w.Role(host), bin, "daemon", "--config", cfgFile, "--socket", socket)
		if err != nil {
			logf.Close()
			stop()
			return nil, err
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			logf.Close()
			stop()
			return nil, fmt.Errorf("start daemon in %s: %w", host, err)
		}
		p := &running{cmd: cmd, socket: socket, log: logf.Name(), done: make(chan error, 1)}
		go func() { p.done <- cmd.Wait(); logf.Close() }()
		procs[host] = p
		if err := waitReady(ctx, p.socket, p.done); err != nil {
			log, _ := os.ReadFile(logf.Name())
			stop()
			return nil, fmt.Errorf("daemon in %s: %v\n%s", host, err, strings.TrimSpace(string(log)))
		}
	}
	return stop, nil
}

func waitReady(ctx context.Context, socket string, done chan error) error {
	deadline := time.Now().Add(15 * time.Second)
	for time.Now().Before(deadline) {
		if _, err := api.NewClient(socket).Status(); err == nil {
			return nil
		}
		select {
		case err := <-done:
			done <- err
			return fmt.Errorf("exited before it was ready (%v)", err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("did not answer on %s within 15s", socket)
}

// lastLogLine is ": " and the last line of a log, to say why a process
// ended ("" when there is none).
func lastLogLine(file string) string {
	b, err := os.ReadFile(file)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if last := strings.TrimSpace(lines[len(lines)-1]); last != "" {
		return ": " + last
	}
	return ""
}
