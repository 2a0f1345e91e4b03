package datapath_test

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/datapath"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// labWorld builds a two-path lab world for one variant.
func labWorld(t *testing.T, src, variant string) *world.World {
	testutil.RequireLab(t)
	// The chains' programs need bpf_rdonly_cast (6.2) and TCX (6.6).
	testutil.RequireFeature(t, kernelfeat.KfuncRdonlyCast)
	testutil.RequireFeature(t, kernelfeat.TCX)
	return testutil.LabWorld(t, src, variant)
}

// sampler reads the subflows of a namespace.
func sampler(t *testing.T, ns string) *observe.Sampler { return testutil.Sampler(t, ns) }

func addChain(t *testing.T, d *testutil.Daemon, spec datapath.ChainSpec) datapath.ChainStatus {
	t.Helper()
	var st datapath.ChainStatus
	if err := d.Client.Do(http.MethodPost, "/v1/chains", spec, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func bulk(w *world.World, d time.Duration) *traffic.Bulk {
	return &traffic.Bulk{ClientNS: w.Host(world.Client).NetNS, ServerNS: w.Host(world.Server).NetNS,
		Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201), Proto: traffic.MPTCP, Upload: true, Duration: d}
}

const twoPaths = `
hosts: {client: {rmem: 8MiB, wmem: 8MiB}, server: {rmem: 8MiB, wmem: 8MiB}}
paths:
  - {name: a, rate: 100mbit, delay: 10ms}
  - {name: b, rate: 100mbit, delay: 10ms}
`

// clamp_rwnd holds one subflow's goodput near the asked rate.
func TestClampRwndHoldsASubflowToItsRate(t *testing.T) {
	w := labWorld(t, twoPaths, "mptcp")
	d := testutil.StartDaemon(t, w.Host(world.Client).NetNS, "policies: []\n")
	addChain(t, d, datapath.ChainSpec{Dev: "b", Hook: datapath.Ingress, Act: "clamp_rwnd(10mbit)"})
	b := bulk(w, 6*time.Second)
	s := sampler(t, w.Host(world.Client).NetNS)
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	time.Sleep(2 * time.Second) // past start-up
	first := pathBytes(t, s, w)
	t0 := time.Now()
	time.Sleep(3 * time.Second)
	last := pathBytes(t, s, w)
	dt := time.Since(t0).Seconds()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	rb := float64(last["b"]-first["b"]) * 8 / 1e6 / dt
	ra := float64(last["a"]-first["a"]) * 8 / 1e6 / dt
	t.Logf("clamped subflow b: %.2f Mbit/s (asked 10), free subflow a: %.1f Mbit/s", rb, ra)
	if rb < 9 || rb > 11 {
		t.Errorf("clamped subflow carried %.2f Mbit/s, want 10 ± 10%%", rb)
	}
	if ra < 50 {
		t.Errorf("the other subflow carried only %.1f Mbit/s", ra)
	}
}

// pathBytes is bytes acknowledged per path on the client's subflows.
func pathBytes(t *testing.T, s *observe.Sampler, w *world.World) map[string]uint64 {
	t.Helper()
	sfs, err := s.Subflows()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]uint64{}
	for _, sf := range sfs {
		for _, p := range w.Paths {
			if sf.Local.Addr() == p.Client.Addr {
				out[p.Name] += sf.BytesAcked
			}
		}
	}
	return out
}

// set_backup flags a subflow backup and new data leaves it (within an RTT
// and two on a quiet machine; the test logs the times). What the kernel already queued on the subflow still goes out
// there, so the client's send buffer is sized as for steering: the paths'
// total bandwidth-delay product (2 × 100 Mbit/s × 20 ms = 500 KB), which
// still fills both paths. With a much larger send buffer the data already
// queued on the subflow leaves first, which can take many RTTs
// (docs/datapath.md).
func TestSetBackupMovesTrafficOffASubflow(t *testing.T) {
	w := labWorld(t, strings.Replace(twoPaths, "client: {rmem: 8MiB, wmem: 8MiB}", "client: {rmem: 8MiB, wmem: 512KiB}", 1), "mptcp")
	d := testutil.StartDaemon(t, w.Host(world.Client).NetNS, "policies: []\n")
	s := sampler(t, w.Host(world.Client).NetNS)
	b := bulk(w, 5*time.Second)
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	time.Sleep(1500 * time.Millisecond)
	before := pathBytes(t, s, w)
	t0 := time.Now()
	time.Sleep(500 * time.Millisecond)
	rate := float64(pathBytes(t, s, w)["b"]-before["b"]) / time.Since(t0).Seconds() // B/s
	var queued uint64
	if sfs, err := s.Subflows(); err == nil {
		for _, sf := range sfs {
			if sf.Local.Addr() == w.Path("b").Client.Addr {
				queued = uint64(sf.NotSent)
			}
		}
	}
	addChain(t, d, datapath.ChainSpec{Dev: "b", Hook: datapath.Ingress, Select: "type(data-ack)", Act: "set_backup"})
	added := time.Now()
	// The last moment new data left on subflow b (bytes_sent grows).
	var lastSent uint64
	lastGrowth := added
	var rtt, flipped time.Duration
	for time.Since(added) < 1500*time.Millisecond {
		sfs, _ := s.Subflows()
		for _, sf := range sfs {
			if sf.Local.Addr() == w.Path("b").Client.Addr {
				if sf.BytesSent > lastSent {
					lastSent, lastGrowth = sf.BytesSent, time.Now()
				}
				if sf.BackupRemote && flipped == 0 {
					flipped = time.Since(added)
				}
				if !sf.BackupRemote && time.Since(added) > time.Second {
					t.Fatalf("one second after the chain, subflow b is not backup: %+v", sf)
				}
				rtt = max(rtt, sf.MinRTT)
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	took := lastGrowth.Sub(added)
	drain := time.Duration(float64(queued) / max(rate, 1) * float64(time.Second))
	t.Logf("subflow b backup %v after the chain was added; new data stopped after %v (RTT %v; %d B queued on it drain in %v at %.1f Mbit/s)",
		flipped, took, rtt, queued, drain, rate*8/1e6)
	if rate*8/1e6 < 80 {
		t.Errorf("subflow b carried %.1f Mbit/s before the chain; the send buffer should still fill its 100 Mbit/s path", rate*8/1e6)
	}
	// How fast is a benchmark's figure (mpsteer bench); here: it happens,
	// and new data stops going there, well inside the 1.5 s watched.
	if flipped == 0 {
		t.Errorf("the subflow never became backup after the chain was added")
	}
	if took > time.Second {
		t.Errorf("new data still left on the subflow %v after the chain was added (RTT %v)", took, rtt)
	}
}

// strip_add_addr keeps the connection on one subflow until released.
func TestStripAddAddrHoldsBackASubflow(t *testing.T) {
	w := labWorld(t, twoPaths, "mptcp")
	// No subflow endpoint on the client: the second subflow can only come
	// from the server announcing its second address (ADD_ADDR).
	for _, h := range []string{world.Client, world.Server} {
		c := testutil.DialPM(t, w.Host(h).NetNS)
		if err := c.SetLimits(pm.Limits{AddAddrAccepted: 1, Subflows: 1}); err != nil {
			t.Fatal(err)
		}
		if h == world.Server {
			if _, err := c.AddEndpoint(pm.Endpoint{Addr: w.Path("b").Server.Addr, Flags: pm.FlagSignal}); err != nil {
				t.Fatal(err)
			}
		} else if err := c.FlushEndpoints(); err != nil {
			t.Fatal(err)
		}
	}
	d := testutil.StartDaemon(t, w.Host(world.Client).NetNS, "policies: []\n")
	st := addChain(t, d, datapath.ChainSpec{Dev: "a", Hook: datapath.Ingress, Select: "type(add-addr)", Act: "strip_add_addr"})
	s := sampler(t, w.Host(world.Client).NetNS)
	b := bulk(w, 4*time.Second)
	done := make(chan error, 1)
	go func() { _, err := b.Run(context.Background()); done <- err }()
	count := func() int { // established subflows
		sfs, _ := s.Subflows()
		n := 0
		for _, sf := range sfs {
			if sf.State == 1 { // TCP_ESTABLISHED
				n++
			}
		}
		return n
	}
	time.Sleep(1500 * time.Millisecond)
	if n := count(); n != 1 {
		t.Fatalf("%d subflows while ADD_ADDR is withheld, want 1", n)
	}
	if err := d.Client.Do(http.MethodPost, fmt.Sprintf("/v1/chains/%d/release", st.ID), nil, &map[string]any{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(2 * time.Second)
	for count() < 2 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := count(); n != 2 {
		var chains []datapath.ChainStatus
		d.Client.Do(http.MethodGet, "/v1/chains", nil, &chains)
		for _, h := range []string{world.Client, world.Server} {
			out, _ := exec.Command("ip", "netns", "exec", w.Host(h).NetNS, "nstat", "-a").CombinedOutput()
			t.Logf("%s counters:\n%s", h, out)
		}
		t.Fatalf("%d subflows after release, want 2; chain: %+v", n, chains)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
