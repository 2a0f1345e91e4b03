package reliability

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// worldChange is a change made to the daemon's namespace under it, and
// what it must say about it (log lines containing says; empty: nothing
// in particular).
type worldChange struct {
	name  string
	fault string
	do    func(t *testing.T, w *world) error
	undo  func(t *testing.T, w *world) error
	says  []string
}

func ipIn(ns string, args ...string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error {
		out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("ip %s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
}

func sysctlIn(key, v string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return netnsutil.Sysctl(w.h.Client, key, v) }
}

// pathManagerIn selects the client's path manager through whichever
// sysctl the kernel has.
func pathManagerIn(pm string) func(t *testing.T, w *world) error {
	return func(t *testing.T, w *world) error { return netnsutil.SetPathManager(w.h.Client, pm) }
}

func worldChanges(client string) []worldChange {
	return []worldChange{
		{name: "address-removed", fault: "the second path's address removed and re-added during a transfer",
			do: ipIn(client, "addr", "del", "10.2.0.1/24", "dev", "veth2"), undo: ipIn(client, "addr", "add", "10.2.0.1/24", "dev", "veth2")},
		{name: "interface-down", fault: "the second path's interface down and up again during a transfer",
			do: ipIn(client, "link", "set", "veth2", "down"), undo: ipIn(client, "link", "set", "veth2", "up")},
		{name: "mptcp-disabled", fault: "MPTCP disabled by sysctl (net.mptcp.enabled=0) and enabled again during a transfer",
			do: sysctlIn("net.mptcp.enabled", "0"), undo: sysctlIn("net.mptcp.enabled", "1"),
			says: []string{"MPTCP was disabled", "MPTCP is enabled again"}},
		{name: "path-manager-switched", fault: "the path manager switched (kernel → userspace → kernel: net.mptcp.path_manager, or pm_type before 6.15) during a transfer",
			do: pathManagerIn("userspace"), undo: pathManagerIn("kernel"),
			says: []string{"the path manager is userspace now", "the path manager is kernel now"}},
	}
}

// TestWorldChanges changes the namespace under a running daemon (prefer
// policy, endpoint mode, a checked upload): the daemon keeps answering,
// says what changed where it matters, the upload completes intact, and
// no retry storm follows.
func TestWorldChanges(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	reps := pick(1, 5)
	tried, survived := 0, 0
	var lost []string
	measured := map[string]any{}
	for _, wc := range worldChanges("") {
		for rep := 0; rep < reps; rep++ {
			t.Run(fmt.Sprintf("%s/%d", wc.name, rep+1), func(t *testing.T) {
				tried++
				w := newWorld(t, 2, false)
				wc = worldChanges(w.h.Client)[indexOf(wc.name)]
				tr := startTransfer(t, w, 20e6)
				d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\npolicies: [{name: prefer, paths: [veth1]}]\n")
				steering(t, d, tr, 2)
				var probs []string
				// The change holds until the daemon has seen it: it said so
				// (it looks at the sysctls once a second), or, when there is
				// nothing to say, an interface or address event started a
				// round; then it has had rounds under the change.
				ifaceRounds := trigger(t, d, "interface")
				said := func(i int) {
					if i < len(wc.says) {
						waitUntil(10*time.Second, func() bool { return logLines(t, d, wc.says[i]) > 0 })
					} else {
						waitUntil(10*time.Second, func() bool { return trigger(t, d, "interface") > ifaceRounds })
						ifaceRounds = trigger(t, d, "interface")
					}
					d.WaitRounds(t, 5)
				}
				if err := wc.do(t, w); err != nil {
					t.Fatal(err)
				}
				said(0)
				if _, err := d.Client.Status(); err != nil {
					probs = append(probs, "no answer after the change: "+err.Error())
				}
				if err := wc.undo(t, w); err != nil {
					t.Fatal(err)
				}
				said(1)
				st, err := d.Client.Status()
				if err != nil {
					probs = append(probs, "no answer after the change was undone: "+err.Error())
				} else if st.PathManager != "kernel" {
					probs = append(probs, "status says path manager "+st.PathManager+" after it was switched back")
				}
				if !tr.progress(10 * time.Second) {
					probs = append(probs, "no byte flowed after the change was undone")
				}
				for _, s := range wc.says {
					if logLines(t, d, s) != 1 {
						probs = append(probs, fmt.Sprintf("the daemon said %q %d times, want once", s, logLines(t, d, s)))
					}
				}
				showLog(t, d)
				refused := logLines(t, d, "REFUSED")
				lines := logLines(t, d, "mpsteer:")
				d.Stop(syscall.SIGTERM)
				if d.Cmd.ProcessState == nil || !d.Cmd.ProcessState.Success() || logLines(t, d, "changes undone") != 1 {
					probs = append(probs, fmt.Sprintf("exit after the change: %v", d.Cmd.ProcessState))
				}
				res := tr.stop()
				if !res.intact() {
					probs = append(probs, "transfer: "+res.String())
				}
				m, _ := measured[wc.name].(map[string]any)
				if m == nil {
					m = map[string]any{"max_log_lines": 0, "refused_lines": 0, "clean_exits": 0}
					measured[wc.name] = m
				}
				m["max_log_lines"] = max(m["max_log_lines"].(int), lines)
				m["refused_lines"] = m["refused_lines"].(int) + refused
				if len(probs) == 0 {
					m["clean_exits"] = m["clean_exits"].(int) + 1
				}
				if len(probs) > 0 {
					b, _ := os.ReadFile(d.Log)
					t.Errorf("%s\nlog:\n%s", strings.Join(probs, "; "), tail(string(b), 30))
					lost = append(lost, wc.name+": "+strings.Join(probs, "; "))
					return
				}
				survived++
			})
		}
	}
	// The namespace's name deleted under the daemon (ip netns del): the
	// namespace lives on while the daemon is in it; the daemon answers on
	// its socket and exits cleanly, undoing what it changed.
	for rep := 0; rep < reps; rep++ {
		t.Run(fmt.Sprintf("netns-deleted/%d", rep+1), func(t *testing.T) {
			tried++
			w := newWorld(t, 2, false)
			before := w.endpoints(t)
			d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\npolicies: [{name: backup, paths: [veth2]}]\n")
			tr := startTransfer(t, w, 20e6)
			steering(t, d, tr, 2)
			res := tr.stop()
			if err := netnsutil.Delete(w.h.Client); err != nil {
				t.Fatal(err)
			}
			// The daemon runs its rounds without the name, and answers.
			var probs []string
			var from uint64
			first := true
			if err := testutil.WaitFor(10*time.Second, func() error {
				st, err := d.Client.Status()
				if err != nil {
					return fmt.Errorf("no answer after the namespace was deleted: %v", err)
				}
				if first {
					from, first = st.Loop.Rounds, false
				}
				if st.Loop.Rounds < from+5 {
					return fmt.Errorf("%d rounds since the namespace was deleted, want 5", st.Loop.Rounds-from)
				}
				return nil
			}); err != nil {
				probs = append(probs, err.Error())
			}
			d.Stop(syscall.SIGTERM)
			if d.Cmd.ProcessState == nil || !d.Cmd.ProcessState.Success() || logLines(t, d, "changes undone") != 1 {
				probs = append(probs, fmt.Sprintf("exit: %v", d.Cmd.ProcessState))
			}
			if !res.intact() {
				probs = append(probs, "transfer: "+res.String())
			}
			// The endpoints went with the namespace; what the daemon's
			// restore did is in its log.
			_ = before
			m, _ := measured["netns-deleted"].(map[string]any)
			if m == nil {
				m = map[string]any{"clean_exits": 0, "max_log_lines": 0}
				measured["netns-deleted"] = m
			}
			m["max_log_lines"] = max(m["max_log_lines"].(int), logLines(t, d, "mpsteer:"))
			if len(probs) > 0 {
				b, _ := os.ReadFile(d.Log)
				t.Errorf("%s\nlog:\n%s", strings.Join(probs, "; "), tail(string(b), 30))
				lost = append(lost, "netns-deleted: "+strings.Join(probs, "; "))
				return
			}
			m["clean_exits"] = m["clean_exits"].(int) + 1
			survived++
		})
	}
	l := lostText(lost)
	record(t, Record{Case: "world-changes", Fault: "address removed/re-added, interface down/up, MPTCP disabled by sysctl, path manager switched, the namespace's name deleted — under a running daemon with a transfer",
		Tried: tried, Survived: survived, Lost: l, Measured: measured}, start)
}

func indexOf(name string) int {
	for i, wc := range worldChanges("") {
		if wc.name == name {
			return i
		}
	}
	return -1
}
