package runner_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

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
`

func TestPreferFastReturnFromBothKindsOfOutage(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	file := writeFile(t, dir, "fastreturn.yaml", fastReturn)
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-fr", os.Getpid()%100000)
	b, err := exec.Command(testutil.Binary(t), "lab", "run", file, "--out", out, "--name", name).CombinedOutput()
	if err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
	sum, err := report.ReadSummary(filepath.Join(out, "prefer-probe", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	if len(sum.Events) != 2 || sum.Events[0].Error != "" || !strings.Contains(sum.Events[0].Detail, "address 10.1.0.1/24 removed") ||
		sum.Events[1].Error != "" || !strings.Contains(sum.Events[1].Detail, "route(s) back") {
		t.Fatalf("events %+v, want the wifi interface down (address removed) and back (address and routes)", sum.Events)
	}
	ups := sum.Recoveries["wifi"]
	if len(ups) != 2 {
		t.Fatalf("link-up → first data %v, want one per outage", ups)
	}
	// A join takes two round trips (40 ms) after its SYN; probes go out at
	// least every 100 ms, and the address event starts them at once. The
	// stalled subflow's own capped retransmission timer took ~500 ms.
	for i, ms := range ups {
		if ms > 300 {
			t.Errorf("outage %d: link-up → first data on wifi %.0f ms, want a handshake after the return (≤ 300 ms)", i+1, ms)
		}
	}
	if sh := sum.Metrics["wifi_share_from_200ms_after_up_mean"]; sh < 0.5 {
		t.Errorf("wifi's share of the bytes from 200 ms after link-up: %.0f%%, want it back to carrying most", sh*100)
	}
	log, _ := os.ReadFile(filepath.Join(out, "prefer-probe", "daemon-client.log"))
	for _, want := range []string{"probe #1 of preferred 10.1.0.1", "is gone (the interface went down)", "the preferred path answers again"} {
		if !strings.Contains(string(log), want) {
			t.Errorf("daemon log lacks %q", want)
		}
	}
}
