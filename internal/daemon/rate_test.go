package daemon_test

import (
	"fmt"
	"math"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/labtest"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/testutil"
)

// Two emulated paths, 50 Mbit/s and 10 ms one way each.
const ratePaths = `
hosts: {client: {rmem: 8MiB, wmem: 8MiB}, server: {rmem: 8MiB, wmem: 8MiB}}
paths:
  - {name: a, rate: 50mbit, delay: 10ms}
  - {name: b, rate: 50mbit, delay: 10ms}
`

// capTolerance is how far from its cap a capped subflow's rate may be in
// TestLimitCapsASubflow. Measured on the 2-core test machine (docs/daemon.md,
// "How rates are applied"): pacing within 1%, rwnd and cc within 2% when
// the machine is quiet; under a load average of 10 and more every way has
// been seen 3–5% off. The test allows 5% so that a loaded CI machine
// passes and a cap that does not hold fails.
const capTolerance = 0.05

// rateWindow is how long the capped subflow's rate is measured, once the
// cap holds: the window ends when the subflow has carried this long's
// worth at its cap of 10 Mbit/s.
const rateWindow = 3 * time.Second

// capBytes is what a subflow carries in d at the test's cap of 10 Mbit/s.
func capBytes(d time.Duration) uint64 { return uint64(10e6 / 8 * d.Seconds()) }

// The rate action end to end: the limit policy caps the subflow on path b
// at 10 Mbit/s while an upload fills both paths; every way of capping
// (pacing, rwnd, and the capping congestion control) holds it within
// capTolerance, measured from the moment the daemon has applied the cap
// and the subflow has come down to it. With the congestion control, the
// capped subflow runs it while capped and gets its own back when the
// daemon exits (the daemon lifts its caps).
func TestLimitCapsASubflow(t *testing.T) {
	for _, via := range []string{"pacing", "rwnd", "cc"} {
		t.Run(via, func(t *testing.T) {
			w := labtest.World(t, ratePaths, "mptcp")
			d := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, fmt.Sprintf("rate_via: %s\npolicies: [{name: limit, rates: {b: 10mbit}}]\n", via))
			b := w.Path("b").Client.Addr
			u := startUpload(t, w)
			// The daemon capped the subflow on path b: status shows the cap
			// and the limit action applied to it (with cc, the subflow runs
			// the capping congestion control: it switches on its next ACK).
			testutil.Eventually(t, 20*time.Second, func() error {
				if err := capApplied(d.Client.Status, b, "10mbit"); err != nil {
					return err
				}
				if cc := u.ccs(b); via == "cc" && (len(cc) != 1 || !strings.HasPrefix(cc[0], "mpscap_")) {
					return fmt.Errorf("the capped subflow runs %v, want mpsteer's capping congestion control (mpscap_…)", cc)
				}
				return nil
			})
			capped := u.ccs(b)
			// What follows the cap is behind (the subflow's ramp-up, or the
			// drain of what it had queued at 50 Mbit/s): it has carried one
			// second's worth at its cap since.
			a0, _ := u.acked(b)
			u.carry(b, a0+capBytes(time.Second), 20*time.Second)
			// The measurement: the time the subflow takes to carry
			// rateWindow's worth at its cap.
			b0, t0 := u.acked(b)
			b1, t1 := u.carry(b, b0+capBytes(rateWindow), 20*time.Second)
			got := float64(b1-b0) * 8 / 1e6 / t1.Sub(t0).Seconds()
			t.Logf("%s: the capped subflow carried %.2f Mbit/s (cap 10, %+.1f%%) over %v, congestion control %v",
				via, got, 100*(got/10-1), t1.Sub(t0).Round(time.Millisecond), capped)
			if math.Abs(got/10-1) > capTolerance {
				t.Fatalf("the subflow on path b carried %.2f Mbit/s, want 10 ± %.0f%%", got, 100*capTolerance)
			}
			if via == "cc" {
				if len(capped) != 1 || !strings.HasPrefix(capped[0], "mpscap_") {
					t.Fatalf("the capped subflow runs %v, want mpsteer's capping congestion control (mpscap_…)", capped)
				}
				d.Stop(syscall.SIGTERM)
				// The sockets take the lifted cap on their next ACK.
				testutil.Eventually(t, 5*time.Second, func() error {
					if after := u.ccs(b); len(after) != 1 || strings.HasPrefix(after[0], "mpscap_") {
						return fmt.Errorf("after the daemon exited the subflow runs %v, want its own congestion control back", after)
					}
					return nil
				})
				t.Logf("after the daemon exited: %v", u.ccs(b))
			}
			u.stop()
		})
	}
}

// capApplied checks that status shows the limit policy's cap of rate on
// the subflow from local address a, and the limit action on it applied.
func capApplied(status func() (*api.Status, error), a netip.Addr, rate string) error {
	st, err := status()
	if err != nil {
		return err
	}
	prefix := a.String() + ":"
	capped := false
	for _, sf := range subflowsOf(st) {
		if strings.HasPrefix(sf.Local, prefix) && sf.Cap != nil && sf.Cap.Policy == "limit" && sf.Cap.Rate == rate {
			capped = true
		}
	}
	if !capped {
		return fmt.Errorf("status shows no %s cap on the subflow from %v: %+v", rate, a, subflowsOf(st))
	}
	for _, act := range st.Actions {
		if act.Kind == "limit" && act.Result == "applied" && strings.HasPrefix(act.Target, prefix) && act.Rate == rate {
			return nil
		}
	}
	return fmt.Errorf("no applied limit action of %s on the subflow from %v among the recent actions: %+v", rate, a, st.Actions)
}
