package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/labtest"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/sockops"
	"mpsteer/internal/testutil"
	"mpsteer/internal/timescale"
	"mpsteer/internal/units"
)

// Receiver-assisted path health end to end, with the real daemons in a
// lab world: the server reports, the client reads and acts; a server
// without the program; and a middlebox that strips the option.

const healthPaths = `
hosts: {client: {cc: reno, rmem: 4MiB, wmem: 4MiB}, server: {cc: reno, rmem: 4MiB, wmem: 4MiB}}
paths:
  - {name: a, rate: 20mbit, delay: 5ms, queue: 100pkt}
  - {name: b, rate: 20mbit, delay: 5ms, queue: 100pkt}
`

// upload runs an MPTCP upload for d; at half time the receiver's last hop
// on path b starts dropping 20% (loss true). It returns the bytes the
// server got.
func upload(t *testing.T, w *labworld.World, d time.Duration, loss bool) int64 {
	t.Helper()
	client, server := w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS
	b := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	done := make(chan error, 1)
	var res traffic.BulkResult
	go func() {
		var err error
		res, err = b.Run(context.Background())
		done <- err
	}()
	if loss {
		time.Sleep(d / 2)
		p := units.Fraction(0.2)
		if _, err := labworld.Control(w.Dir, labworld.Request{Op: "set", Link: w.Path("b").Link, Dir: scenario.DirUp,
			Patch: &scenario.Patch{Loss: &p}}); err != nil {
			t.Fatal(err)
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	return res.Bytes
}

func subflowsOf(st *api.Status) []api.SubflowStatus {
	var out []api.SubflowStatus
	for _, c := range st.Connections {
		out = append(out, c.Subflows...)
	}
	return out
}

// uploadUntilStopped runs an MPTCP upload until the returned stop is called (or
// a minute, stretched by the time scale, has passed), and stop says how
// many bytes the server got.
func uploadUntilStopped(t *testing.T, w *labworld.World) (stop func() int64) {
	t.Helper()
	client, server := w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS
	b := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: timescale.Scaled(time.Minute)}
	ctx, cancel := context.WithCancel(context.Background())
	type result struct {
		res traffic.BulkResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := b.Run(ctx)
		done <- result{res, err}
	}()
	stopped := false
	stop = func() int64 {
		t.Helper()
		if stopped {
			return 0
		}
		stopped = true
		cancel()
		r := <-done
		if r.err != nil && !errors.Is(r.err, context.Canceled) {
			t.Fatal(r.err)
		}
		return r.res.Bytes
	}
	t.Cleanup(func() { stop() })
	return stop
}

// The server reports both paths on every subflow's ACKs; the client reads
// the reports (paths named by address ids that match its subflows'), sees
// path b go bad when its last hop starts losing, and sets it aside. The
// test waits on each state in turn, while the upload runs, however slow
// the machine.
func TestHealthReportsEndToEnd(t *testing.T) {
	w := labtest.World(t, healthPaths, "mptcp")
	srv := testutil.StartDaemon(t, w.Host(labworld.Server).NetNS, "report_health: {source: lab}\n")
	cli := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, "policies: [{name: ramptcp}]\n")
	bAddr := w.Path("b").Client.Addr.String()
	// reports returns the subflows of paths a and b once each has a report
	// from the server, path a's fresh and healthy.
	reports := func() (good, bad *api.SubflowStatus, err error) {
		st, err := cli.Client.Status()
		if err != nil {
			return nil, nil, err
		}
		if st == nil || st.Health == nil || !st.Health.Parse {
			return nil, nil, fmt.Errorf("client status without the health program: %+v", st)
		}
		for _, sf := range subflowsOf(st) {
			sf := sf
			if sf.Health == nil || sf.Health.Direction != "received" {
				return nil, nil, fmt.Errorf("subflow %s→%s has no report: %+v", sf.Local, sf.Remote, sf.Health)
			}
			if strings.HasPrefix(sf.Local, bAddr+":") {
				bad = &sf
			} else {
				good = &sf
			}
		}
		switch {
		case good == nil || bad == nil:
			return nil, nil, fmt.Errorf("want both paths' subflows: %+v", subflowsOf(st))
		case time.Duration(good.Health.AgeMs)*time.Millisecond > timescale.Scaled(500*time.Millisecond) ||
			good.Health.LastHopPct == nil || *good.Health.LastHopPct < 97:
			return nil, nil, fmt.Errorf("path a's report: %+v", good.Health)
		}
		return good, bad, nil
	}
	stop := uploadUntilStopped(t, w)
	// Both paths are reported, and neither is set aside, before anything
	// goes wrong.
	testutil.Eventually(t, timescale.Scaled(15*time.Second), func() error {
		_, bad, err := reports()
		if err == nil && bad.Decision != nil && bad.Decision.Backup {
			err = fmt.Errorf("path b set aside before its last hop lost anything: %+v", bad.Decision)
		}
		return err
	})
	// While nothing is lost the report fits beside MPTCP's own options on
	// most pure ACKs (loss brings SACK blocks, which crowd it out): the
	// share over the first hundred reports the server wrote.
	var clean map[string]uint64
	testutil.Eventually(t, timescale.Scaled(15*time.Second), func() error {
		ss, err := srv.Client.Status()
		if err != nil {
			return err
		}
		if ss.Health == nil || ss.Health.Program["written"]+ss.Health.Program["partial"] < 100 {
			return fmt.Errorf("server's reports so far: %+v", ss.Health)
		}
		clean = ss.Health.Program
		return nil
	})
	if tried := clean["acks"] - clean["no_info"]; tried == 0 || 2*(clean["written"]+clean["partial"]) < tried {
		t.Fatalf("before any loss the report fitted on %d of %d ACKs: %v", clean["written"]+clean["partial"], tried, clean)
	}
	// Path b's last hop starts losing 20%: the client sets b aside and
	// keeps a.
	p := units.Fraction(0.2)
	if _, err := labworld.Control(w.Dir, labworld.Request{Op: "set", Link: w.Path("b").Link, Dir: scenario.DirUp,
		Patch: &scenario.Patch{Loss: &p}}); err != nil {
		t.Fatal(err)
	}
	testutil.Eventually(t, timescale.Scaled(15*time.Second), func() error {
		good, bad, err := reports()
		switch {
		case err != nil:
			return err
		case bad.Decision == nil || !bad.Decision.Backup || bad.Decision.Policy != "ramptcp":
			return fmt.Errorf("path b not set aside: %+v", bad.Decision)
		case good.Decision == nil || good.Decision.Backup:
			return fmt.Errorf("path a not active: %+v", good.Decision)
		}
		return nil
	})
	if n := stop(); n == 0 {
		t.Fatal("nothing arrived")
	}
	st, err := cli.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	ss, err := srv.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	prog := ss.Health.Program
	t.Logf("server: %v; client: %v", prog, st.Health.Program)
	if prog["written"] <= clean["written"] {
		t.Fatalf("server wrote %d reports, none since the loss started", prog["written"])
	}
	if st.Health.Program["parsed"] == 0 || st.Health.Program["malformed"] != 0 {
		t.Fatalf("client parsed %d, malformed %d", st.Health.Program["parsed"], st.Health.Program["malformed"])
	}
}

// A peer without the program sends no option: the transfer is as usual
// and the policy has no opinion.
func TestHealthWithoutReceiverProgram(t *testing.T) {
	w := labtest.World(t, healthPaths, "mptcp")
	cli := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, "policies: [{name: ramptcp}]\n")
	got := make(chan *api.Status, 1)
	go func() { time.Sleep(2500 * time.Millisecond); st, _ := cli.Client.Status(); got <- st }()
	if n := upload(t, w, 3*time.Second, false); n < 5<<20 {
		t.Fatalf("only %d bytes in 3 s over 2×20 Mbit/s", n)
	}
	st := <-got
	if st.Health.Program["parsed"] != 0 {
		t.Fatalf("parsed %d reports from a peer that sends none", st.Health.Program["parsed"])
	}
	for _, sf := range subflowsOf(st) {
		if sf.Decision != nil || sf.Health != nil {
			t.Fatalf("decision or report without reports: %+v %+v", sf.Decision, sf.Health)
		}
	}
}

// A middlebox strips the option on the way: the receiver writes it, the
// sender never sees it, and the transfer goes on.
func TestHealthOptionStripped(t *testing.T) {
	w := labtest.World(t, healthPaths, "mptcp")
	testutil.RequireRoot(t, "BPF")
	strip, err := sockops.NewStripper(true) // TUN devices: no Ethernet header
	if err != nil {
		t.Fatal(err)
	}
	defer strip.Close()
	for _, p := range w.Paths {
		if err := strip.Attach(w.Host(labworld.Client).NetNS, p.Client.Dev, false); err != nil {
			t.Fatal(err)
		}
	}
	srv := testutil.StartDaemon(t, w.Host(labworld.Server).NetNS, "report_health: {source: transport}\n")
	cli := testutil.StartDaemon(t, w.Host(labworld.Client).NetNS, "policies: [{name: ramptcp}]\n")
	got := make(chan *api.Status, 1)
	go func() { time.Sleep(2500 * time.Millisecond); st, _ := cli.Client.Status(); got <- st }()
	if n := upload(t, w, 3*time.Second, false); n < 5<<20 {
		t.Fatalf("only %d bytes in 3 s over 2×20 Mbit/s", n)
	}
	st := <-got
	ss, err := srv.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	stripped, left := strip.Stats()
	t.Logf("server wrote %d reports, the middlebox stripped %d packets (left %d), client parsed %d",
		ss.Health.Program["written"], stripped, left, st.Health.Program["parsed"])
	if ss.Health.Program["written"] == 0 || stripped == 0 || left != 0 {
		t.Fatal("the option was not written, or not stripped")
	}
	if st.Health.Program["parsed"] != 0 || st.Health.Program["malformed"] != 0 {
		t.Fatalf("client parsed %d, malformed %d after stripping", st.Health.Program["parsed"], st.Health.Program["malformed"])
	}
}
