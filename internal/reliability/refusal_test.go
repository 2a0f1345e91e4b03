package reliability

import (
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// refusalCase: a setup in which the kernel refuses what the daemon asks.
type refusalCase struct {
	name  string
	fault string
	// setup prepares the world and returns the daemon's config.
	setup func(t *testing.T, w *world) string
	user  bool
	// count: log lines with this text are the daemon's tries (default
	// "REFUSED"); at most max of them in the window.
	count string
	max   int
}

func refusalCases() []refusalCase {
	return []refusalCase{
		{name: "per-subflow-flags-under-kernel-pm", fault: "the kernel refuses per-subflow backup flags (backup_via: subflow under the kernel PM)",
			setup: func(t *testing.T, w *world) string {
				return "backup_via: subflow\npolicies: [{name: prefer, paths: [veth1]}]\n"
			}},
		{name: "endpoint-table-full", fault: "the kernel's endpoint table is full (8 endpoints): the daemon cannot add the endpoint that carries the initial subflow's flag",
			setup: func(t *testing.T, w *world) string {
				// 10.2.0.1 is one; fill the table with addresses of no
				// interface (the kernel takes them).
				for i := 1; i <= 7; i++ {
					if _, err := w.cli.AddEndpoint(pm.Endpoint{Addr: netip.AddrFrom4([4]byte{10, 99, 0, byte(i)})}); err != nil {
						t.Fatalf("endpoint %d: %v", i, err)
					}
				}
				return "policies: [{name: prefer, paths: [veth2]}]\n"
			}},
		{name: "subflow-limit-reached", fault: "the peer's subflow limit is reached: joins the daemon opens (fullmesh, 4 per pair) are refused", user: true,
			setup: func(t *testing.T, w *world) string {
				if err := w.srv.SetLimits(pm.Limits{AddAddrAccepted: 0, Subflows: 1}); err != nil {
					t.Fatal(err)
				}
				return "policies: [{name: fullmesh, subflows_per_pair: 4, interfaces: [veth1, veth2], backoff: 200ms, max_backoff: 5s}]\n"
			},
			// The peer completes each join and resets it: every try is a
			// creation that worked locally; 6 pairs' worth of subflows,
			// backing off from 200ms.
			count: "create ", max: 60},
	}
}

// TestKernelSaysNo runs the daemon where the kernel refuses its actions:
// it keeps running, says why, and neither retries every round nor logs
// every retry (a retry storm): once the first refusal is said, the daemon
// runs rounds (30, or 100 under soak: 3 and 10 s at its 100 ms interval)
// and its log must have far fewer such lines.
func TestKernelSaysNo(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	rounds := pick(30, 100)
	measured := map[string]any{}
	tried, survived := 0, 0
	var lost []string
	for _, rc := range refusalCases() {
		t.Run(rc.name, func(t *testing.T) {
			tried++
			w := newWorld(t, 2, rc.user)
			cfg := rc.setup(t, w)
			tr := startTransfer(t, w, 20e6)
			d := testutil.StartDaemonWith(t, w.h.Client, "interval: 100ms\n"+cfg, "--metrics", "127.0.0.1:9900")
			what, most := rc.count, rc.max
			if what == "" {
				what, most = "REFUSED", 10
			}
			// The fault happened (the daemon said so the first time), and
			// the daemon has had its rounds to retry since.
			waitUntil(15*time.Second, func() bool { return logLines(t, d, what) > 0 })
			d.WaitRounds(t, uint64(rounds))
			_, err := d.Client.Status()
			if Soak() {
				most *= 3
			}
			refusedLines := logLines(t, d, what)
			m := metricsText(t, w.h.Client)
			refusedTries, _ := Metric(m, "mpsteer_policy_actions_total", "kind=backup", "policy=prefer", "result=refused")
			epTries, _ := Metric(m, "mpsteer_policy_actions_total", "kind=endpoint", "policy=daemon", "result=refused")
			creates, _ := Metric(m, "mpsteer_policy_actions_total", "kind=create", "policy=fullmesh")
			st, _ := d.Client.Status()
			res := tr.stop()
			measured[rc.name] = map[string]any{"log_lines": refusedLines, "rounds": rounds, "kernel_calls": refusedTries + epTries + creates}
			var probs []string
			if err != nil || st == nil {
				probs = append(probs, fmt.Sprintf("daemon does not answer: %v", err))
			}
			if refusedLines == 0 {
				probs = append(probs, "no refusal logged (the fault did not happen, or was not said)")
			}
			// Once per target and reason, and the retries that back off:
			// far fewer lines than rounds.
			if refusedLines > most {
				probs = append(probs, fmt.Sprintf("%d %q lines in %d rounds: a retry storm", refusedLines, what, rounds))
			}
			if !res.intact() {
				probs = append(probs, "transfer: "+res.String())
			}
			if len(probs) > 0 {
				b, _ := os.ReadFile(d.Log)
				t.Errorf("%s\nlog:\n%s", strings.Join(probs, "; "), tail(string(b), 30))
				lost = append(lost, rc.name+": "+strings.Join(probs, "; "))
				return
			}
			survived++
		})
	}
	// EPERM: a daemon without CAP_NET_ADMIN says which capability is
	// missing and exits (it could neither read nor change the path
	// manager).
	t.Run("no-cap-net-admin", func(t *testing.T) {
		tried++
		w := newWorld(t, 1, false)
		cfg := t.TempDir() + "/c.yaml"
		os.WriteFile(cfg, []byte("policies: [{name: prefer, paths: [veth1]}]\n"), 0o644)
		cmd := exec.Command("ip", "netns", "exec", w.h.Client, "setpriv", "--inh-caps=-net_admin", "--bounding-set=-net_admin",
			testutil.Binary(t), "daemon", "--config", cfg, "--socket", t.TempDir()+"/d.sock")
		done := make(chan struct{})
		var out []byte
		var err error
		go func() { out, err = cmd.CombinedOutput(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Errorf("the daemon without CAP_NET_ADMIN kept running: %s", out)
			lost = append(lost, "no-cap-net-admin: kept running")
			return
		}
		measured["no-cap-net-admin"] = map[string]any{"exit_error": fmt.Sprint(err), "names_capability": strings.Contains(string(out), "CAP_NET_ADMIN")}
		if err == nil || !strings.Contains(string(out), "CAP_NET_ADMIN") {
			t.Errorf("without CAP_NET_ADMIN: %v: %s (want an exit naming the capability)", err, out)
			lost = append(lost, "no-cap-net-admin: "+string(out))
			return
		}
		survived++
	})
	l := lostText(lost)
	record(t, Record{Case: "kernel-says-no", Fault: "the kernel refuses: per-subflow flags under the kernel PM, endpoint table full, peer's subflow limit reached, no CAP_NET_ADMIN (EPERM)",
		Tried: tried, Survived: survived, Lost: l, Measured: measured}, start)
}

func tail(s string, n int) string {
	l := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(l) > n {
		l = l[len(l)-n:]
	}
	return strings.Join(l, "\n")
}
