package testutil

import (
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// privileged serializes privileged tests across test processes. `go test
// ./...` runs packages side by side, and a lab test that checks a share
// of bytes or a rate beside another package's lab run measures the
// contention instead (CI saw a subflow carry 41 Mbit/s of its 100 Mbit/s
// path beside the daemon's lab tests). The first privileged test of a
// process takes an exclusive lock on a file in the temporary directory
// and the process keeps it while any of its tests holds it; unprivileged
// tests never take it and still run side by side.
var privileged struct {
	mu      sync.Mutex
	holders int
	f       *os.File
}

// LockFile is the file the privileged tests of concurrent test processes
// take turns on.
func LockFile() string { return filepath.Join(os.TempDir(), "mpsteer-privileged-tests.lock") }

// holdPrivileged takes the lock for t (waiting for another process's
// privileged tests to end) and gives it back when t ends.
func holdPrivileged(t testing.TB) {
	privileged.mu.Lock()
	defer privileged.mu.Unlock()
	if privileged.holders == 0 {
		f, err := os.OpenFile(LockFile(), os.O_CREATE|os.O_RDWR, 0o600)
		if err != nil {
			t.Logf("privileged tests of other packages may run beside this one: %v", err)
		} else {
			start := time.Now()
			if err := unix.Flock(int(f.Fd()), unix.LOCK_EX); err != nil {
				t.Logf("privileged tests of other packages may run beside this one: lock %s: %v", f.Name(), err)
				f.Close()
			} else {
				privileged.f = f
				if waited := time.Since(start); waited > time.Second {
					t.Logf("waited %v for other packages' privileged tests", waited.Round(time.Millisecond))
				}
			}
		}
	}
	privileged.holders++
	t.Cleanup(func() {
		privileged.mu.Lock()
		defer privileged.mu.Unlock()
		if privileged.holders--; privileged.holders == 0 && privileged.f != nil {
			privileged.f.Close() // gives the lock back
			privileged.f = nil
		}
	})
}
