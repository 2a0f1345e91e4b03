package runner

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"mpsteer/internal/lab/scenario"
)

// MptcpdBinary is where Debian installs mptcpd (off PATH).
var MptcpdBinary = "/usr/libexec/mptcpd"

// mptcpdPluginDir finds the directory that holds the plugin.
func mptcpdPluginDir(plugin string) (string, error) {
	for _, pattern := range scenario.MptcpdPluginDirs {
		dirs, _ := filepath.Glob(pattern)
		for _, d := range dirs {
			if _, err := os.Stat(filepath.Join(d, plugin+".so")); err == nil {
				return d, nil
			}
		}
	}
	return "", fmt.Errorf("mptcpd plugin %q not found in %s (Debian's mptcpd-plugins package has it; `make deps` installs it)", plugin, strings.Join(scenario.MptcpdPluginDirs, ", "))
}

// startMptcpd runs mptcpd, the peer path-manager daemon, in the client
// with the variant's plugin, and waits until its plugin says it is
// initialized. The returned function stops it.
func (r *variantRun) startMptcpd(ctx context.Context) (func(), error) {
	if r.v.Mptcpd == "" {
		return func() {}, nil
	}
	if _, err := os.Stat(MptcpdBinary); err != nil {
		return nil, fmt.Errorf("variant %s runs mptcpd, which is not installed (%s missing; `make deps` installs Debian's mptcpd)", r.v.Name, MptcpdBinary)
	}
	dir, err := mptcpdPluginDir(r.v.Mptcpd)
	if err != nil {
		return nil, err
	}
	logFile := filepath.Join(r.dir, "mptcpd-client.log")
	logf, err := os.Create(logFile)
	if err != nil {
		return nil, err
	}
	cmd, err := r.w.Command(r.w.ClientRole(), MptcpdBinary, "--plugin-dir="+dir, "--path-manager="+r.v.Mptcpd,
		"--load-plugins="+r.v.Mptcpd, "--log=stderr", "--debug", "--notify-flags=existing,skip_link_local,skip_loopback")
	if err != nil {
		logf.Close()
		return nil, err
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("start mptcpd: %w", err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); logf.Close() }()
	var once sync.Once
	// Stopping also tells whether mptcpd lasted the run: if it exited by
	// itself, the run fails.
	stop := func() {
		once.Do(func() {
			select {
			case err := <-done:
				r.fail(fmt.Sprintf("mptcpd exited during the run (%v)%s", err, lastLogLine(logFile)))
				return
			default:
			}
			cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				cmd.Process.Kill()
				<-done
			}
		})
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(logFile)
		if strings.Contains(string(b), "initialized") {
			return stop, nil
		}
		select {
		case err := <-done:
			done <- err
			return nil, fmt.Errorf("mptcpd exited before it was ready (%v): %s", err, strings.TrimSpace(string(b)))
		case <-ctx.Done():
			stop()
			return nil, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return nil, errors.New("mptcpd did not report its plugin initialized within 10s")
		}
	}
}
