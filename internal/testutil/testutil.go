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
	"time"

	"mpsteer/internal/observe"
)

// RequireEnv names the environment variable that turns every skip of a
// privileged test into a failure. `make test` sets it when it runs as
// root, and so does CI: there, a test that cannot run means a broken
// setup, and a broken setup must not pass green.
const RequireEnv = "MPSTEER_REQUIRE_PRIVILEGED"

// Unavailable skips the test with reason, or fails it when privileged
// tests are required (RequireEnv set).
func Unavailable(t testing.TB, reason string) {
	t.Helper()
	if os.Getenv(RequireEnv) != "" {
		t.Fatalf("privileged test cannot run: %s (%s is set: a skip here would hide a broken setup)", reason, RequireEnv)
	}
	t.Skip("privileged test: " + reason)
}

// RequireRoot skips (or fails, see Unavailable) unless the test runs as
// root; what says what needs it. A test that runs takes its turn with the
// privileged tests of other packages (lablock.go).
func RequireRoot(t testing.TB, what string) {
	t.Helper()
	if os.Geteuid() != 0 {
		Unavailable(t, what+" needs root; run `make test` as root")
	}
	holdPrivileged(t)
}

// RequireTool skips (or fails) unless a command is installed.
func RequireTool(t testing.TB, name string) {
	t.Helper()
	if _, err := exec.LookPath(name); err != nil {
		Unavailable(t, name+" is not installed (`make deps` installs it)")
	}
}

// RequireLab skips (or fails) unless the test can build lab worlds: root,
// MPTCP, TUN and the ip command.
func RequireLab(t testing.TB) {
	t.Helper()
	RequireRoot(t, "the lab (network namespaces, TUN devices)")
	if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err != nil {
		Unavailable(t, "this kernel has no MPTCP")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		Unavailable(t, "/dev/net/tun is missing")
	}
	RequireTool(t, "ip")
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// Binary returns the mpsteer executable: $MPSTEER_BIN when set (make test
// sets it), otherwise one built from this checkout once per test process,
// as .cache/test-bin/mpsteer: one file however many test processes build
// it (each builds beside it and renames over it; a process running the
// one before keeps its file), so nothing piles up in /tmp.
func Binary(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("MPSTEER_BIN"); p != "" {
		return p
	}
	buildOnce.Do(func() {
		binPath, buildErr = buildBinary(filepath.Join(RepoRoot(), ".cache", "test-bin"))
	})
	if buildErr != nil {
		t.Fatalf("build mpsteer: %v", buildErr)
	}
	return binPath
}

func buildBinary(dir string) (string, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, "mpsteer-*.tmp")
	if err != nil {
		return "", err
	}
	tmp.Close()
	defer os.Remove(tmp.Name()) // gone once renamed; left by a failed build
	cmd := exec.Command("go", "build", "-o", tmp.Name(), "./cmd/mpsteer")
	cmd.Dir = RepoRoot()
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: string(out), err: err}
	}
	bin := filepath.Join(dir, "mpsteer")
	return bin, os.Rename(tmp.Name(), bin)
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

// Sampler opens an inet_diag sampler in a named namespace, closed when the
// test ends.
func Sampler(t testing.TB, ns string) *observe.Sampler {
	t.Helper()
	s, err := observe.NewSamplerIn(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// Holds waits for cond to hold and fails the test, naming what, if it
// does not within the bound (Eventually with a boolean condition).
func Holds(t testing.TB, within time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Within(within, cond) {
		t.Fatalf("%s: not within %v", what, within)
	}
}

// Within reports whether cond holds within d (for a test that says more
// when it fails).
func Within(d time.Duration, cond func() bool) bool {
	return WaitFor(d, func() error {
		if !cond() {
			return errNotYet
		}
		return nil
	}) == nil
}
