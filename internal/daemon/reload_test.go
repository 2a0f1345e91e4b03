package daemon

import (
	"testing"
	"time"
)

// Interval changes in a row must never block: the main loop that would
// read the wake-up may be the one running the reload (SIGHUP).
func TestReloadIntervalNeverBlocks(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "interval: 100ms\n")
	done := make(chan error, 1)
	go func() {
		for _, iv := range []string{"50ms", "70ms", "90ms"} {
			if _, err := d.reload("/c.yaml", []byte("interval: "+iv+"\n")); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("three interval changes with nobody reading the wake-up blocked the reload")
	}
	if d.cfg.Interval != 90*time.Millisecond {
		t.Fatalf("interval %v, want the last one applied", d.cfg.Interval)
	}
}

// A reload keeps a policy whose entry did not change (and its state), and
// builds anew one whose entry changed.
func TestReloadKeepsUnchangedPolicies(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies:\n  - {name: dynthresh}\n  - {name: prefer, paths: [wlan0]}\n")
	dyn, pref := d.cfg.Policies[0], d.cfg.Policies[1]
	// Same dynthresh written differently (a comment, flow vs block style);
	// prefer's paths changed.
	if _, err := d.reload("/c.yaml", []byte("policies:\n  # the same\n  - name: dynthresh\n  - {name: prefer, paths: [eth0]}\n")); err != nil {
		t.Fatal(err)
	}
	if d.engine.Policies[0] != dyn {
		t.Fatal("an unchanged dynthresh entry was rebuilt (its state lost)")
	}
	if d.engine.Policies[1] == pref {
		t.Fatal("a changed prefer entry was kept")
	}
}
