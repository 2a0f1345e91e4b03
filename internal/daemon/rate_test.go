package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/labtest"
	"mpsteer/internal/lab/traffic"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/testutil"
	"mpsteer/internal/timescale"
)

// Two emulated paths, 50 Mbit/s and 10 ms one way each.
const ratePaths = `
hosts: {client: {rmem: 8MiB, wmem: 8MiB}, server: {rmem: 8MiB, wmem: 8MiB}}
paths:
  - {name: a, rate: 50mbit, delay: 10ms}
  - {name: b, rate: 50mbit, delay: 10ms}
`

// The rate action end to end: the limit policy caps the subflow on path b
// at 10 Mbit/s while an upload fills both paths; every way of capping
// (pacing, rwnd, and the capping congestion control) holds it within 10%.
// With the congestion control, the capped subflow runs it while capped and
// gets its own back when the daemon exits (the daemon lifts its caps).
func TestLimitCapsASubflow(t *testing.T) {
	for _, via := range []string{"pacing", "rwnd", "cc"} {
		t.Run(via, func(t *testing.T) {
			w := labtest.World(t, ratePaths, "mptcp")
			d := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, fmt.Sprintf("rate_via: %s\npolicies: [{name: limit, rates: {b: 10mbit}}]\n", via))
			b := w.Path("b").Client.Addr
			u := startUpload(t, w, 8*time.Second)
			time.Sleep(3 * time.Second)
			b0, t0 := u.acked(b), time.Now()
			capped := u.ccs(b)
			time.Sleep(3 * time.Second)
			got := float64(u.acked(b)-b0) * 8 / 1e6 / time.Since(t0).Seconds()
			t.Logf("%s: the capped subflow carried %.2f Mbit/s (cap 10), congestion control %v", via, got, capped)
			if got < 9 || got > 11 {
				t.Fatalf("the subflow on path b carried %.1f Mbit/s, want 10 ± 10%%", got)
			}
			if via == "cc" {
				if len(capped) != 1 || !strings.HasPrefix(capped[0], "mpscap_") {
					t.Fatalf("the capped subflow runs %v, want mpsteer's capping congestion control (mpscap_…)", capped)
				}
				d.Stop(syscall.SIGTERM)
				time.Sleep(300 * time.Millisecond)
				if after := u.ccs(b); len(after) != 1 || strings.HasPrefix(after[0], "mpscap_") {
					t.Fatalf("after the daemon exited the subflow runs %v, want its own congestion control back", after)
				} else {
					t.Logf("after the daemon exited: %v", after)
				}
			}
			u.wait()
		})
	}
}

// watchedUpload is an MPTCP upload over a lab world, watched from the client.
type watchedUpload struct {
	t    *testing.T
	s    *observe.Sampler
	done chan error
}

func startUpload(t *testing.T, w *labworld.World, d time.Duration) *watchedUpload {
	t.Helper()
	client, server := w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS
	b := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	u := &watchedUpload{t: t, s: sampler(t, client), done: make(chan error, 1)}
	go func() { _, err := b.Run(context.Background()); u.done <- err }()
	return u
}

func (u *watchedUpload) subflows(a netip.Addr) []observe.Subflow {
	sfs, err := u.s.Subflows()
	if err != nil {
		u.t.Fatal(err)
	}
	var out []observe.Subflow
	for _, sf := range sfs {
		if sf.Local.Addr() == a {
			out = append(out, sf)
		}
	}
	return out
}

// acked: bytes acknowledged on the subflows from local address a.
func (u *watchedUpload) acked(a netip.Addr) uint64 {
	var n uint64
	for _, sf := range u.subflows(a) {
		n += sf.BytesAcked
	}
	return n
}

// ccs: the congestion controls of the subflows from local address a.
func (u *watchedUpload) ccs(a netip.Addr) []string {
	var out []string
	for _, sf := range u.subflows(a) {
		out = append(out, sf.CC)
	}
	return out
}

func (u *watchedUpload) wait() {
	if err := <-u.done; err != nil {
		u.t.Fatal(err)
	}
}

// Two emulated paths at low rates, for the kernel matrix's emulated
// guests: 5 Mbit/s and 10 ms one way each.
const slowRatePaths = `
hosts: {client: {rmem: 4MiB, wmem: 4MiB}, server: {rmem: 4MiB, wmem: 4MiB}}
paths:
  - {name: a, rate: 5mbit, delay: 10ms}
  - {name: b, rate: 5mbit, delay: 10ms}
`

// Each way of capping takes effect on this kernel, at low rates (the
// kernel matrix runs this where nothing can be measured; the rates
// themselves are TestLimitCapsASubflow's): the limit policy's cap on
// path b is applied, and what enforces it says it acted on the subflow:
// the rate program set the pacing rate (pacing) or switched the
// congestion control (cc), the rwnd chain rewrote the peer's windows.
func TestLimitAppliesEachWayOfCapping(t *testing.T) {
	for _, via := range []string{"pacing", "rwnd", "cc"} {
		t.Run(via, func(t *testing.T) {
			if via == "cc" {
				testutil.RequireFeature(t, kernelfeat.StructOpsCC) // before 6.4 the daemon refuses it
			}
			w := labtest.World(t, slowRatePaths, "mptcp")
			d := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, fmt.Sprintf("rate_via: %s\npolicies: [{name: limit, rates: {b: 1mbit}}]\n", via))
			b := w.Path("b").Client.Addr.String() + ":"
			if via != "rwnd" {
				// The rate program sees only the subflows established
				// after it is attached: the upload starts once it is.
				testutil.Eventually(t, timescale.Scaled(5*time.Second), func() error {
					if st, err := d.Client.Status(); err != nil || st.RateProgram == nil {
						return fmt.Errorf("no rate program yet (%v)", err)
					}
					return nil
				})
			}
			stop := uploadUntilStopped(t, w)
			testutil.Eventually(t, timescale.Scaled(15*time.Second), func() error {
				st, err := d.Client.Status()
				if err != nil {
					return err
				}
				applied := 0
				for _, a := range st.Actions {
					if a.Kind == "limit" && a.Result == "applied" && strings.HasPrefix(a.Target, b) {
						applied++
					}
				}
				if applied == 0 {
					return fmt.Errorf("no cap applied on path b: actions %v", st.Actions)
				}
				switch via {
				case "pacing":
					if st.RateProgram["rate_set"] == 0 || st.RateProgram["failed"] != 0 {
						return fmt.Errorf("rate program: %v", st.RateProgram)
					}
				case "cc":
					if st.RateProgram["cc_switched"] == 0 || st.RateProgram["failed"] != 0 {
						return fmt.Errorf("rate program: %v", st.RateProgram)
					}
				case "rwnd":
					var chains []struct {
						Act      string `json:"act"`
						Modified uint64 `json:"modified_packets"`
					}
					if err := json.Unmarshal(st.Chains, &chains); err != nil {
						return fmt.Errorf("chains %s: %v", st.Chains, err)
					}
					if len(chains) != 1 || !strings.HasPrefix(chains[0].Act, "clamp_rwnd(") || chains[0].Modified == 0 {
						return fmt.Errorf("chains %s", st.Chains)
					}
				}
				return nil
			})
			if stop() == 0 {
				t.Fatal("nothing arrived")
			}
		})
	}
}
