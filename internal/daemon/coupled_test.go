package daemon_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/labtest"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
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
	u := startUpload(t, w)
	testutil.Eventually(t, 20*time.Second, func() error {
		if ca, cb := u.ccs(a), u.ccs(b); len(ca) != 1 || len(cb) != 1 || ca[0] != lia || cb[0] != lia {
			return fmt.Errorf("subflows run %v and %v, want %s", ca, cb, lia)
		}
		return capApplied(d.Client.Status, b, "10mbit")
	})
	got := capRate(t, u, w, "coupled lia, pacing")
	if got > 10*(1+capOver) || got < 10*(1-capUnder) {
		t.Errorf("the subflow on path b carried %.2f Mbit/s, want 10 (at most %.0f%% over, %.0f%% under)", got, 100*capOver, 100*capUnder)
	}
	// The next connection's subflows are told apart by their token: the
	// stopped one's may linger while MPTCP closes it (up to its close
	// timeout), still running LIA.
	old := map[uint32]bool{}
	for _, sf := range append(u.subflows(a), u.subflows(b)...) {
		old[sf.Token] = true
	}
	u.stop()

	if _, err := d.Client.Apply(api.ApplyRequest{File: d.Config, Config: "policies: []\n"}); err != nil {
		t.Fatal(err)
	}
	if st, err := d.Client.Status(); err != nil || len(st.Coupled) != 0 {
		t.Fatalf("after the reload, coupled in status: %v (%v)", st.Coupled, err)
	}
	u = startUpload(t, w)
	testutil.Eventually(t, 20*time.Second, func() error {
		if ca, cb := u.ccsExcept(a, old), u.ccsExcept(b, old); len(ca) != 1 || len(cb) != 1 || strings.HasPrefix(ca[0], "mps") || strings.HasPrefix(cb[0], "mps") {
			return fmt.Errorf("subflows run %v and %v, want the host's default", ca, cb)
		}
		return nil
	})
	u.stop()
}

// An MPTCP sink (Python: the test's own processes run in cgroups) and an
// uploader that sends for argv[3] seconds.
const (
	mptcpSinkPy = `import socket, sys, threading
def sink(c):
    while c.recv(65536):
        pass
for port in sys.argv[1:]:
    s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("0.0.0.0", int(port)))
    s.listen(8)
    threading.Thread(target=lambda s=s: [threading.Thread(target=sink, args=(s.accept()[0],), daemon=True).start() for _ in iter(int, 1)], daemon=True).start()
threading.Event().wait()
`
	mptcpUploadPy = `import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
s.connect((sys.argv[1], int(sys.argv[2])))
end, buf = time.time() + float(sys.argv[3]), b"x" * 65536
while time.time() < end:
    s.sendall(buf)
`
)

// Per cgroup: the client's connections in cgroup app run BALIA (its
// scoped entry), those in cgroup other LIA (the unscoped one): the
// innermost scope decides.
func TestCoupledPerCgroup(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireTool(t, "python3")
	if err := coupled.Supported(); err != nil {
		testutil.Unavailable(t, err.Error())
	}
	cg := newCgroups(t, "app", "other")
	w := labtest.World(t, ratePaths, "mptcp")
	client, server := w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS
	d := testutil.StartDaemon(t, client, fmt.Sprintf("coupled: lia\npolicies: [{name: coupled, algorithm: balia, cgroup: %s}]\n", cg.path("app")))
	testutil.Eventually(t, 3*time.Second, func() error {
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		if len(st.Coupled) != 2 {
			return fmt.Errorf("coupled in status: %v", st.Coupled)
		}
		return nil
	})
	sink := exec.Command("ip", "netns", "exec", server, "python3", "-c", mptcpSinkPy, "5301", "5302")
	if err := sink.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sink.Process.Kill(); sink.Wait() })
	srv := w.Paths[0].Server.Addr.String()
	var out bytes.Buffer
	testutil.Eventually(t, 5*time.Second, func() error { // the sink is listening
		return exec.Command("ip", "netns", "exec", client, "python3", "-c", mptcpUploadPy, srv, "5301", "0").Run()
	})
	app := cg.run(t, "app", client, &out, "python3", "-c", mptcpUploadPy, srv, "5301", "4")
	other := cg.run(t, "other", client, &out, "python3", "-c", mptcpUploadPy, srv, "5302", "4")
	s := sampler(t, client)
	testutil.Eventually(t, 3*time.Second, func() error {
		sfs, err := s.Subflows()
		if err != nil {
			return err
		}
		want := map[uint16]string{5301: "mpsbal_", 5302: "mpslia_"}
		seen := map[uint16]int{}
		for _, sf := range sfs {
			p := sf.Remote.Port()
			if want[p] == "" || sf.State != observe.TCPEstablished {
				continue
			}
			if !strings.HasPrefix(sf.CC, want[p]) {
				return fmt.Errorf("a subflow to port %d runs %q, want %s…", p, sf.CC, want[p])
			}
			seen[p]++
		}
		if seen[5301] < 2 || seen[5302] < 2 {
			return fmt.Errorf("subflows so far: %v", seen)
		}
		return nil
	})
	for _, c := range []*exec.Cmd{app, other} {
		if err := c.Wait(); err != nil {
			t.Fatalf("uploader: %v\n%s", err, out.String())
		}
	}
}
