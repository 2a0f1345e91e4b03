// Package testutil holds helpers for privileged tests: they skip with a
// clear reason when the machine cannot run them, and they find (or build)
// the real mpsteer binary so that tests drive what users run.
package testutil

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
)

// RequireLab skips the test unless it can build lab worlds: root, MPTCP,
// TUN and the ip command.
func RequireLab(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("privileged test: needs root (network namespaces, TUN devices); run `make test` as root")
	}
	if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err != nil {
		t.Skip("privileged test: this kernel has no MPTCP")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		t.Skip("privileged test: /dev/net/tun is missing")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		t.Skip("privileged test: the ip command (iproute2) is missing")
	}
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary returns the mpsteer executable: $MPSTEER_BIN when set (make test
// sets it), otherwise one built from this checkout once per test process.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MPSTEER_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "mpsteer-test-bin")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "mpsteer")
		cmd := exec.Command("go", "build", "-o", binPath, "./cmd/mpsteer")
		cmd.Dir = RepoRoot()
		out, err := cmd.CombinedOutput()
		if err != nil {
			buildErr = &buildError{out: string(out), err: err}
		}
	})
	if buildErr != nil {
		t.Fatalf("build mpsteer: %v", buildErr)
	}
	return binPath
}

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// RepoRoot is the checkout's top directory.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Join(filepath.Dir(file), "..", "..")
}
