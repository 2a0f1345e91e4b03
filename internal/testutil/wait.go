package testutil

import (
	"errors"
	"mpsteer/internal/timescale"
	"testing"
	"time"
)

// Eventually waits until cond returns nil, checking every 20 ms, and fails
// the test with cond's last error if it has not within timeout. Tests wait
// on the state they need this way, never on a fixed sleep.
func Eventually(t testing.TB, timeout time.Duration, cond func() error) {
	t.Helper()
	if err := WaitFor(timeout, cond); err != nil {
		t.Fatalf("not within %v: %v", timeout, err)
	}
}

// WaitFor is Eventually without a test: it returns cond's last error, or
// nil as soon as cond holds. The timeout is stretched by the time scale
// (internal/timescale) where everything runs slower, in emulated guests. It looks every millisecond at first, then
// less often, up to every 20 ms: a condition that is costly to read (a
// socket dump) must not load the machine it watches.
func WaitFor(timeout time.Duration, cond func() error) error {
	deadline := time.Now().Add(timescale.Scaled(timeout))
	every := time.Millisecond
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return err
		}
		<-time.After(every)
		every = min(2*every, 20*time.Millisecond)
	}
}

var errNotYet = errors.New("not yet")
