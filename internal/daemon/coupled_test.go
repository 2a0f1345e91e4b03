package daemon_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/labtest"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/sockops/coupled"
	"mpsteer/internal/testutil"
)

// The daemon with `coupled: lia` beside the limit policy: both subflows
// of an upload run the daemon's LIA and the capped one still holds its
// cap; a reload without the key unloads it, and the next connection's
// subflows run the host's default.
func TestCoupledWithRateCapsAndReload(t *testing.T) {
	testutil.RequireLab(t)
	if err := coupled.Supported(); err != nil {
		testutil.Unavailable(t, err.Error())
	}
	w := labtest.World(t, ratePaths, "mptcp")
	d := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, "coupled: lia\npolicies: [{name: limit, rates: {b: 10mbit}}]\n")
	lia := ""
	testutil.Eventually(t, 3*time.Second, func() error {
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		m, _ := st.Coupled["lia"].(map[string]any)
		if m == nil || fmt.Sprint(m["cgroups"]) != "[/]" {
			return fmt.Errorf("coupled in status: %v", st.Coupled)
		}
		lia, _ = m["congestion_control"].(string)
		return nil
	})
	if !strings.HasPrefix(lia, "mpslia_") {
		t.Fatalf("LIA registered as %q", lia)
	}
	a, b := w.Path("a").Client.Addr, w.Path("b").Client.Addr
	u := startUpload(t, w, 6*time.Second)
	testutil.Eventually(t, 3*time.Second, func() error {
		if ca, cb := u.ccs(a), u.ccs(b); len(ca) != 1 || len(cb) != 1 || ca[0] != lia || cb[0] != lia {
			return fmt.Errorf("subflows run %v and %v, want %s", ca, cb, lia)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	b0, t0 := u.acked(b), time.Now()
	time.Sleep(3 * time.Second)
	got := float64(u.acked(b)-b0) * 8 / 1e6 / time.Since(t0).Seconds()
	t.Logf("the capped coupled subflow carried %.2f Mbit/s (cap 10)", got)
	if got < 9 || got > 11 {
		t.Errorf("the subflow on path b carried %.1f Mbit/s, want 10 ± 10%%", got)
	}
	u.wait()

	if _, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: "policies: []\n"}); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Client.Status(); err != nil || len(st.Coupled) != 0 {
		t.Fatalf("after the reload, coupled in status: %v (%v)", st.Coupled, err)
	}
	u = startUpload(t, w, time.Second)
	testutil.Eventually(t, 3*time.Second, func() error {
		if ca, cb := u.ccs(a), u.ccs(b); len(ca) != 1 || len(cb) != 1 || strings.HasPrefix(ca[0], "mps") || strings.HasPrefix(cb[0], "mps") {
			return fmt.Errorf("subflows run %v and %v, want the host's default", ca, cb)
		}
		return nil
	})
	u.wait()
}
