package reliability

import (
	"fmt"
	"math/rand/v2"
	"os"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// TestReloadStorm reloads the daemon's config many times a second during a
// checked upload, valid and invalid configs mixed, through `policy apply`
// and SIGHUP: every valid one is applied and every invalid one refused
// (counted by the daemon's metrics), the kernel ends as the last config
// wants, and goroutines, file descriptors and BPF links are back to what
// they were.
func TestReloadStorm(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	n, span := pick(20, 100), pick(2*time.Second, 10*time.Second)
	w := newWorld(t, 2, false)
	valid := func(i int) string {
		path := []string{"veth1", "veth2"}[i%2]
		sel := []string{"dst(10.0.0.0/8)", "dst(10.1.0.0/16)"}[i%2]
		return fmt.Sprintf("interval: %dms\npolicies: [{name: prefer, paths: [%s]}]\nchains:\n  - {id: 1, dev: veth1, hook: egress, select: '%s', act: count}\n", 100+i%3*10, path, sel)
	}
	invalid := []string{
		"policies: [{name: prefer, k: 0}]\n",
		"polices: []\n",
		"interval: 100\n",
		// The second chain cannot attach: the first must be rolled back.
		"chains:\n  - {id: 1, dev: veth1, hook: egress, select: 'dst(10.2.0.0/16)', act: count}\n  - {dev: nosuch0, hook: ingress, act: count}\n",
		"policies: [{name: fullmesh}]\n", // needs the userspace path manager
	}
	d := testutil.StartDaemonWith(t, w.h.Client, valid(0), "--metrics", "127.0.0.1:9900", "--watch-config=false")
	tr := startTransfer(t, w, 20e6)
	// The first config in force before the baseline counts: the daemon
	// steers the transfer, 10.2.0.1 is backup (prefer veth1) and the
	// chain counts packets.
	steering(t, d, tr, 2)
	inForce := func() error {
		if f := w.endpoints(t)[w.h.ClientAddr(2)]; f&pm.FlagBackup == 0 {
			return fmt.Errorf("endpoint %v has flags %v, want backup (prefer veth1)", w.h.ClientAddr(2), f)
		}
		var chains []map[string]any
		if err := d.Client.Do("GET", "/v1/chains", nil, &chains); err != nil {
			return err
		}
		if len(chains) != 1 || chains[0]["select"] != "dst(10.0.0.0/8)" {
			return fmt.Errorf("chains %v, want the one of dst(10.0.0.0/8)", chains)
		}
		return nil
	}
	testutil.Eventually(t, 10*time.Second, inForce)
	counts := func() (goroutines, fds, links float64) {
		m := metricsText(t, w.h.Client)
		p, err := ReadProc(pid(d))
		if err != nil {
			t.Fatal(err)
		}
		return metric(t, m, "go_goroutines"), metric(t, m, "process_open_fds"), float64(p.BPFLinks)
	}
	g0, f0, l0 := counts()
	backup0 := metric(t, metricsText(t, w.h.Client), "mpsteer_policy_actions_total", "kind=backup", "policy=prefer", "result=applied")
	rng := rand.New(rand.NewPCG(1, 2))
	wantApplied, wantRefused := map[string]int{}, map[string]int{}
	last := 0 // the last valid config applied
	flips := 0
	var errs []string
	gap := span / time.Duration(n)
	for i := 1; i <= n; i++ {
		next := time.Now().Add(gap)
		ok := rng.IntN(3) != 0 || i == n // the last one valid
		cfg := invalid[rng.IntN(len(invalid))]
		vi := last
		if ok {
			vi = rng.IntN(2)
			if i == n {
				vi = 0 // as at the start: the counts compare
			}
			cfg = valid(vi)
		}
		sighup := rng.IntN(5) == 0
		trigger := "policy apply"
		if sighup {
			trigger = "SIGHUP"
			if err := os.WriteFile(d.Config, []byte(cfg), 0o644); err != nil {
				t.Fatal(err)
			}
			before := reloads(t, w.h.Client, "SIGHUP")
			d.Cmd.Process.Signal(syscall.SIGHUP)
			// Signals coalesce: one SIGHUP at a time.
			if !waitUntil(5*time.Second, func() bool { return reloads(t, w.h.Client, "SIGHUP") > before }) {
				errs = append(errs, fmt.Sprintf("reload %d: SIGHUP not handled within 5s", i))
			}
		} else {
			_, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: cfg})
			if (err == nil) != ok {
				errs = append(errs, fmt.Sprintf("reload %d (valid %v): %v", i, ok, err))
			}
		}
		if ok {
			wantApplied[trigger]++
			if vi%2 != last%2 {
				flips++
			}
			last = vi
		} else {
			wantRefused[trigger]++
		}
		// The storm's pace: n reloads over span.
		time.Sleep(time.Until(next))
	}
	// The last config (as the first) in force, and the counts back within
	// what the check below allows (the leaks it reports are what stays
	// after 10 s).
	settled := waitUntil(10*time.Second, func() bool {
		if inForce() != nil {
			return false
		}
		g, f, l := counts()
		return g <= g0+3 && f <= f0+2 && l == l0
	})
	g1, f1, l1 := counts()
	m := metricsText(t, w.h.Client)
	backup1 := metric(t, m, "mpsteer_policy_actions_total", "kind=backup", "policy=prefer", "result=applied")
	refusedActs, _ := Metric(m, "mpsteer_policy_actions_total", "kind=backup", "policy=prefer", "result=refused")
	for _, trig := range []string{"policy apply", "SIGHUP"} {
		a, _ := Metric(m, "mpsteer_config_reloads_total", "result=applied", "trigger="+trig)
		r, _ := Metric(m, "mpsteer_config_reloads_total", "result=refused", "trigger="+trig)
		if int(a) != wantApplied[trig] || int(r) != wantRefused[trig] {
			errs = append(errs, fmt.Sprintf("%s: the daemon counted %v applied and %v refused, sent %d valid and %d invalid", trig, a, r, wantApplied[trig], wantRefused[trig]))
		}
	}
	// The kernel as the last config (prefer veth1) wants it.
	if err := inForce(); err != nil {
		errs = append(errs, fmt.Sprintf("10 s after the storm: %v", err))
	}
	// Leaks: the same config as at the start; allow the metrics scrape's
	// own connection and a timer or two.
	if g1 > g0+3 || f1 > f0+2 || l1 != l0 {
		errs = append(errs, fmt.Sprintf("goroutines %v → %v, fds %v → %v, BPF links %v → %v", g0, g1, f0, f1, l0, l1))
	}
	d.Stop(syscall.SIGTERM)
	res := tr.stop()
	if !res.intact() {
		errs = append(errs, "transfer: "+res.String())
	}
	lost := lostText(errs)
	if len(errs) > 0 {
		t.Error(lost)
	}
	survived := 0
	if len(errs) == 0 {
		survived = n
	}
	record(t, Record{Case: "reload-storm", Fault: fmt.Sprintf("%d config reloads in %v during a transfer (2/3 valid, 1/5 by SIGHUP, the rest by policy apply)", n, span),
		Tried: n, Survived: survived, Lost: lost, Measured: map[string]any{
			"applied":            fmt.Sprint(wantApplied),
			"refused":            fmt.Sprint(wantRefused),
			"goroutines":         []float64{g0, g1},
			"open_fds":           []float64{f0, f1},
			"bpf_links":          []float64{l0, l1},
			"preferred_flips":    flips,
			"backup_actions":     backup1 - backup0,
			"refused_actions":    refusedActs,
			"transfer_bytes":     res.Received,
			"transfer_mismatch":  res.Mismatched,
			"transfer_delivered": res.Sent == res.Received,
			"settled_within_10s": settled,
		}}, start)
}

func reloads(t *testing.T, ns, trigger string) float64 {
	m := metricsText(t, ns)
	v, _ := Metric(m, "mpsteer_config_reloads_total", "result=applied", "trigger="+trigger)
	r, _ := Metric(m, "mpsteer_config_reloads_total", "result=refused", "trigger="+trigger)
	return v + r
}
