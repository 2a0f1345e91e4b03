package daemon_test

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/lab/traffic"
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

// The rate action end to end: the limit policy caps the subflow on path b
// at 10 Mbit/s while an upload fills both paths; both ways of capping
// (pacing, rwnd) hold it within 10%.
func TestLimitCapsASubflow(t *testing.T) {
	for _, via := range []string{"pacing", "rwnd"} {
		t.Run(via, func(t *testing.T) {
			w := testutil.LabWorld(t, ratePaths, "mptcp")
			testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, fmt.Sprintf("rate_via: %s\npolicies: [{name: limit, rates: {b: 10mbit}}]\n", via))
			got := rateOn(t, w, w.Path("b").Client.Addr, 6*time.Second)
			t.Logf("%s: the capped subflow carried %.2f Mbit/s (cap 10)", via, got)
			if got < 9 || got > 11 {
				t.Fatalf("the subflow on path b carried %.1f Mbit/s, want 10 ± 10%%", got)
			}
		})
	}
}

// rateOn runs an upload for d and returns what the subflows from local
// address a carried (Mbit/s, acknowledged bytes) over its second half.
func rateOn(t *testing.T, w *labworld.World, a netip.Addr, d time.Duration) float64 {
	t.Helper()
	client, server := w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS
	s := sampler(t, client)
	b := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	acked := func() uint64 {
		sfs, err := s.Subflows()
		if err != nil {
			t.Fatal(err)
		}
		var n uint64
		for _, sf := range sfs {
			if sf.Local.Addr() == a {
				n += sf.BytesAcked
			}
		}
		return n
	}
	time.Sleep(d / 2)
	b0, t0 := acked(), time.Now()
	time.Sleep(d/2 - 500*time.Millisecond)
	b1, t1 := acked(), time.Now()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return float64(b1-b0) * 8 / 1e6 / t1.Sub(t0).Seconds()
}
