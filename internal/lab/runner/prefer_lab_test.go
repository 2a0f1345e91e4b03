package runner_test

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// Both kinds of outage of the preferred path, and prefer's fast return
// from each: a silent one (the link blackholed, 2 s to 3.5 s) and the
// interface going down (carrier and address gone, 5 s to 6.5 s).
const fastReturn = `
name: fastreturn
paths:
  - {name: wifi, rate: 10mbit, delay: 10ms, queue: 100pkt, outage: {at: 2s, for: 1500ms}}
  - {name: cell, rate: 10mbit, delay: 10ms, queue: 100pkt}
traffic:
  - {type: bulk, duration: 8s}
events:
  - {at: 5s, path: wifi, action: ifdown}
  - {at: 6500ms, path: wifi, action: ifup}
variants:
  - name: prefer-probe
    path_manager: {client: userspace, server: kernel}
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
  - name: prefer-kernel
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
  - name: prefer-kernel-join
    paths: [cell, wifi]
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
`

// Under the userspace path manager prefer probes with joins of its own and
// closes a subflow whose address is gone; under the kernel path manager
// (the README's config) it re-adds the endpoint and closes the subflows of
// the address the interface lost: by id 0 where wifi is the connection's
// own address (mpsteer's endpoint for it added on its return), by removing
// the lab's endpoint where wifi joined (added back on its return).
func TestPreferFastReturnFromBothKindsOfOutage(t *testing.T) {
	testutil.RequireLab(t)
	out, name := labRun(t, "fr", fastReturn)
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
	for _, v := range []struct {
		name string
		log  []string
	}{
		{"prefer-probe", []string{"probe #1 of preferred 10.1.0.1", "is gone (the interface went down)", "the preferred path answers again"}},
		{"prefer-kernel", []string{"reopen endpoint 10.1.0.1 (re-added", "its subflows of id 0 closed) — prefer: preferred 10.1.0.1 is gone (its interface lost it)", "owned by mpsteer) — prefer: preferred 10.1.0.1 has no viable subflow"}},
		{"prefer-kernel-join", []string{"reopen endpoint 10.1.0.1 (removed: added back once the address is) — prefer: preferred 10.1.0.1 is gone (its interface lost it)", "added back once an interface has it again"}},
	} {
		sum, err := report.ReadSummary(filepath.Join(out, v.name, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		if len(sum.Events) != 2 || sum.Events[0].Error != "" || !strings.Contains(sum.Events[0].Detail, "address 10.1.0.1/24 removed") ||
			sum.Events[1].Error != "" || !strings.Contains(sum.Events[1].Detail, "route(s) back") {
			t.Fatalf("%s: events %+v, want the wifi interface down (address removed) and back (address and routes)", v.name, sum.Events)
		}
		ups := sum.Recoveries["wifi"]
		if len(ups) != 2 {
			t.Fatalf("%s: link-up → first data %v, want one per outage", v.name, ups)
		}
		// A join takes two round trips (40 ms) after its SYN; probes go out
		// at least every 100 ms, and the address event starts them at once.
		// The stalled subflow's own capped retransmission timer took ~500 ms.
		for i, ms := range ups {
			if ms > 300 {
				t.Errorf("%s: outage %d: link-up → first data on wifi %.0f ms, want a handshake after the return (≤ 300 ms)", v.name, i+1, ms)
			}
		}
		if sh := sum.Metrics["wifi_share_from_200ms_after_up_mean"]; sh < 0.5 {
			t.Errorf("%s: wifi's share of the bytes from 200 ms after link-up: %.0f%%, want it back to carrying most", v.name, sh*100)
		}
		log, _ := os.ReadFile(filepath.Join(out, v.name, "daemon-client.log"))
		for _, want := range v.log {
			if !strings.Contains(string(log), want) {
				t.Errorf("%s: daemon log lacks %q:\n%s", v.name, want, log)
			}
		}
	}
}

// prefer as the README gives it, under the kernel path manager the lab
// gives the client: nothing but the preferred path in the config. The
// preferred wifi is silent from 2 s to 4 s, as a path that joined the
// connection (wifi-join) and as the path the connection started on
// (wifi-initial: its endpoint is the one mpsteer owns).
const fastReturnKernel = `
name: fastreturn-kernel
paths:
  - {name: cell, rate: 10mbit, delay: 10ms, queue: 100pkt}
  - {name: wifi, rate: 10mbit, delay: 10ms, queue: 100pkt, outage: {at: 2s, for: 2s}}
traffic:
  - {type: bulk, duration: 7s}
preferred: wifi
variants:
  - name: wifi-join
    paths: [cell, wifi]
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
  - name: wifi-initial
    paths: [wifi, cell]
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
`

// Without the fast return the stalled subflow comes back at its next
// retransmission, up to a second (the RTO cap) after the link; with it a
// fresh subflow's SYN leaves every 40 ms and its join takes two round
// trips (40 ms). The bounds are wide: the machine running the tests is
// shared.
func TestPreferFastReturnUnderTheKernelPMWithTheDefaults(t *testing.T) {
	testutil.RequireLab(t)
	out, _ := labRun(t, "frk", fastReturnKernel)
	// wifi is 10.2.0.1 in both (addresses follow the scenario's paths):
	// the lab's subflow endpoint (id 1) where it joined, mpsteer's own
	// where the connection started on it.
	for _, v := range []struct{ name, endpoint string }{
		{"wifi-join", "10.2.0.1 subflow ifindex"},
		{"wifi-initial", "endpoint add 10.2.0.1 (owned by mpsteer)"},
	} {
		sum, err := report.ReadSummary(filepath.Join(out, v.name, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		log, _ := os.ReadFile(filepath.Join(out, v.name, "daemon-client.log"))
		if sum.LinkUpToFirstDataMs == nil || *sum.LinkUpToFirstDataMs > 400 {
			t.Errorf("%s: link-up → first data on wifi %v ms, want a join after the return (≤ 400 ms)\n%s", v.name, show(sum.LinkUpToFirstDataMs), log)
		}
		if sh := sum.PreferredShareAfterReturn; sh == nil || *sh < 0.7 {
			t.Errorf("%s: wifi's share of the 4 s after its return %v, want it back to carrying most (≥ 70%%)", v.name, show(sh))
		}
		for _, want := range []string{v.endpoint, "reopen endpoint 10.2.0.1 (re-added: id"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("%s: daemon log lacks %q:\n%s", v.name, want, log)
			}
		}
	}
}

// The preferred wifi silent from the start: the kernel's join from it
// meets a silent path, and its SYN is retransmitted every second (at 1, 2,
// 3 s …). The outage ends half-way between two of them: without the
// daemon's probing the path is back at the next, half a second later.
const lateKernel = `
name: late-kernel
paths:
  - {name: cell, rate: 10mbit, delay: 10ms, queue: 100pkt}
  - {name: wifi, rate: 10mbit, delay: 10ms, queue: 100pkt, outage: {at: 0s, for: 2.5s}}
traffic:
  - {type: bulk, duration: 6s}
preferred: wifi
variants:
  - name: prefer
    paths: [cell, wifi]
    daemon:
      client: {policies: [{name: prefer, paths: [wifi]}]}
`

func TestPreferProbesAPreferredPathThatNeverJoined(t *testing.T) {
	testutil.RequireLab(t)
	out, _ := labRun(t, "lk", lateKernel)
	sum, err := report.ReadSummary(filepath.Join(out, "prefer", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(out, "prefer", "daemon-client.log"))
	if sum.LinkUpToFirstDataMs == nil || *sum.LinkUpToFirstDataMs > 400 {
		t.Errorf("link-up → first data on wifi %v ms, want a probe's join, not the kernel's SYN half a second later (≤ 400 ms)\n%s", show(sum.LinkUpToFirstDataMs), log)
	}
	if want := "no subflow from it was established since the connection was"; !strings.Contains(string(log), want) {
		t.Errorf("daemon log lacks %q:\n%s", want, log)
	}
}

func show(v *float64) string {
	if v == nil {
		return "none"
	}
	return fmt.Sprintf("%.3g", *v)
}

// The new user: a daemon with an empty config, the preference
// given at run time (mpsteer prefer) on the path the connection joined,
// its subflows established before. They get the RTO cap and the bounded
// unsent queue then (an iterator over the sockets), and the fast return.
const hintKernel = `
name: hint-kernel
hosts:
  client: {rmem: 4MiB, wmem: 4MiB}
  server: {rmem: 4MiB, wmem: 4MiB}
paths:
  - {name: cell, rate: 10mbit, delay: 10ms, queue: 100pkt}
  - {name: wifi, rate: 10mbit, delay: 10ms, queue: 100pkt, outage: {at: 3s, for: 2s}}
traffic:
  - {type: bulk, duration: 8s}
preferred: wifi
variants:
  - name: hint
    paths: [cell, wifi]
    daemon:
      client: {policies: []}
`

func TestPreferGivenAtRunTimeReturnsFastUnderTheKernelPM(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "hint-kernel.yaml", hintKernel)
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-hk", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", file, "--out", out, "--name", name)
	var output strings.Builder
	cmd.Stdout, cmd.Stderr = &output, &output
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	// Once the upload runs on both paths, the user prefers wifi.
	c := api.NewClient(filepath.Join(world.StateRoot, name, "daemon-client.sock"))
	err := testutil.WaitFor(20*time.Second, func() error {
		st, err := c.Status()
		if err != nil {
			return err
		}
		for _, conn := range st.Connections {
			if len(conn.Subflows) >= 2 {
				return nil
			}
		}
		return fmt.Errorf("no connection on both paths yet")
	})
	if err == nil {
		_, err = c.Prefer(api.PreferRequest{Targets: []string{"wifi"}})
	}
	if err != nil {
		cmd.Process.Kill()
		<-done
		t.Fatalf("hint: %v\n%s", err, output.String())
	}
	if err := <-done; err != nil {
		t.Fatalf("lab run: %v\n%s", err, output.String())
	}
	sum, err := report.ReadSummary(filepath.Join(out, "hint", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	log, _ := os.ReadFile(filepath.Join(out, "hint", "daemon-client.log"))
	if sum.LinkUpToFirstDataMs == nil || *sum.LinkUpToFirstDataMs > 400 {
		t.Errorf("link-up → first data on wifi %s ms, want a join after the return (≤ 400 ms)\n%s", show(sum.LinkUpToFirstDataMs), log)
	}
	if sh := sum.PreferredShareAfterReturn; sh == nil || *sh < 0.7 {
		t.Errorf("wifi's share of the 4 s after its return %s, want it back to carrying most (≥ 70%%)", show(sh))
	}
	st, _ := json.Marshal(sum.Daemon)
	if !strings.Contains(string(st), `"existing_set"`) || strings.Contains(string(st), `"existing_set":0`) {
		t.Errorf("the subflows established before the hint were given nothing: %s", st)
	}
}
