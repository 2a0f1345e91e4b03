package mptcpize_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/mptcpize"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/testutil"
	"mpsteer/internal/timescale"
)

// inCgroup starts a command in a cgroup and a network namespace, as a user
// would start it there: unmodified, with no MPTCP in its code.
func inCgroup(t *testing.T, cg, ns string, out *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `echo $$ > "$1/cgroup.procs" && shift 2 && exec ip netns exec "$0" "$@"`, ns, cg, "--"}, args...)...)
	// sh's $0 is ns, $1 the cgroup, "--" is dropped by the shift with it.
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd
}

// Unmodified applications: Python's http.server and an iperf3 server in
// the server's scoped cgroup; curl and an iperf3 client in the client's.
// Their connections are MPTCP, as both namespaces' MP_CAPABLE counters
// show; curl from another cgroup stays TCP against the same MPTCP
// server. Low rates: a 2 MiB file and one second of iperf3 at 8 Mbit/s.
func TestUnmodifiedApplicationsSwitchInTheScopedCgroupOnly(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireFeature(t, kernelfeat.UpdateSocketProto)
	for _, tool := range []string{"python3", "curl", "iperf3"} {
		testutil.RequireTool(t, tool)
	}
	root, err := bpfutil.Cgroup2Root()
	if err != nil {
		testutil.Unavailable(t, "no cgroup v2 hierarchy: "+err.Error())
	}
	base := filepath.Join(root, fmt.Sprintf("mpsteer-apps-%d", os.Getpid()))
	names := []string{"srv", "app", "other"}
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, n := range names {
		if err := os.Mkdir(filepath.Join(base, n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for _, n := range append(names, "") {
			dir := filepath.Join(base, n)
			os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
			// The killed processes take a moment to go.
			testutil.WaitFor(2*time.Second, func() error { return os.Remove(dir) })
			if _, err := os.Stat(dir); err == nil {
				t.Errorf("cgroup %s left behind", dir)
			}
		}
	})
	cgID := func(n string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(base, n), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	h := testutil.TwoHosts(t, 1)
	// One switcher per namespace (each is the daemon of its namespace),
	// the server's attached first: its program runs first for the client's
	// sockets too, and must leave them to the client's (curl asks for
	// IPPROTO_TCP by name).
	for _, sw := range [][2]string{{h.Server, "srv"}, {h.Client, "app"}} {
		ns, scope := sw[0], sw[1]
		var cookie uint64
		if err := netnsutil.Do(ns, func() (err error) { cookie, err = bpfutil.NetNSCookie(); return err }); err != nil {
			t.Fatal(err)
		}
		s, err := mptcpize.New(cookie)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		if err := s.Set([]uint64{cgID(scope)}); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	const size = 2 << 20
	if err := os.WriteFile(filepath.Join(dir, "file"), bytes.Repeat([]byte("mpsteer!"), size/8), 0o644); err != nil {
		t.Fatal(err)
	}
	srv := filepath.Join(base, "srv")
	var httpOut, iperfOut bytes.Buffer
	for _, cmd := range []*exec.Cmd{
		inCgroup(t, srv, h.Server, &httpOut, "python3", "-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", dir),
		inCgroup(t, srv, h.Server, &iperfOut, "iperf3", "-s", "-p", "5201"),
	} {
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	}
	testutil.Eventually(t, timescale.Scaled(20*time.Second), func() error {
		out, _ := exec.Command("ip", "netns", "exec", h.Server, "ss", "-Htln").CombinedOutput()
		if !strings.Contains(string(out), ":8080") || !strings.Contains(string(out), ":5201") {
			return fmt.Errorf("the servers do not listen: %s", out)
		}
		return nil
	})
	// And they are MPTCP listeners: ss -M lists MPTCP sockets only.
	if mp, _ := exec.Command("ip", "netns", "exec", h.Server, "ss", "-HlnM").CombinedOutput(); !strings.Contains(string(mp), ":8080") || !strings.Contains(string(mp), ":5201") {
		t.Fatalf("the servers listen, but not on MPTCP sockets (ss -lnM):\n%s", mp)
	}

	url := fmt.Sprintf("http://%s:8080/file", h.ServerAddr(1))
	run := func(cg string, args ...string) string {
		t.Helper()
		var out bytes.Buffer
		cmd := inCgroup(t, filepath.Join(base, cg), h.Client, &out, args...)
		if err := cmd.Wait(); err != nil {
			t.Fatalf("%s in %s: %v: %s", args[0], cg, err, out.String())
		}
		return out.String()
	}
	// delta runs fn and returns how the counters moved in each namespace.
	delta := func(fn func()) (cli, srv observe.MPTCPCounters) {
		c0, s0 := testutil.MPTCPCounters(t, h.Client), testutil.MPTCPCounters(t, h.Server)
		fn()
		return testutil.MPTCPCounters(t, h.Client).Since(c0), testutil.MPTCPCounters(t, h.Server).Since(s0)
	}
	curl := []string{"curl", "-sS", "--limit-rate", "8M", "-o", "/dev/null", "-w", "%{size_download}", url}

	cli, sv := delta(func() {
		if got := run("app", curl...); got != strconv.Itoa(size) {
			t.Errorf("curl in app fetched %q bytes, want %d", got, size)
		}
	})
	if cli["MPCapableSYNTX"] != 1 || cli["MPCapableSYNACKRX"] != 1 || sv["MPCapableSYNRX"] != 1 {
		t.Errorf("curl in app against http.server: client %v, server %v; want one MP_CAPABLE handshake each way", cli, sv)
	}
	cli, sv = delta(func() {
		out := run("app", "iperf3", "-c", h.ServerAddr(1).String(), "-p", "5201", "-t", "1", "-b", "8M", "-J")
		if !strings.Contains(out, `"sum_received"`) {
			t.Errorf("iperf3 in app: %s", out)
		}
	})
	// iperf3 opens a control connection and a data connection.
	if cli["MPCapableSYNTX"] != 2 || cli["MPCapableSYNACKRX"] != 2 || sv["MPCapableSYNRX"] != 2 {
		t.Errorf("iperf3 in app: client %v, server %v; want two MP_CAPABLE handshakes", cli, sv)
	}
	cli, sv = delta(func() {
		if got := run("other", curl...); got != strconv.Itoa(size) {
			t.Errorf("curl in other fetched %q bytes, want %d", got, size)
		}
	})
	if cli["MPCapableSYNTX"] != 0 || sv["MPCapableSYNRX"] != 0 {
		t.Errorf("curl in other: client %v, server %v; want plain TCP (no MP_CAPABLE)", cli, sv)
	}
}
