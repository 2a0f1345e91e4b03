package daemon_test

import (
	"bytes"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/bpfutil"
	"mpsteer/internal/mptcpize"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
	"mpsteer/internal/timescale"
)

// cgroups: a cgroup v2 subtree of the test's own, removed when the test
// ends whatever its outcome (its processes killed first: all of them are
// the test's).
type cgroups struct {
	root, base string // base: path from the hierarchy's root
}

func newCgroups(t *testing.T, names ...string) *cgroups {
	t.Helper()
	root, err := bpfutil.Cgroup2Root()
	if err != nil {
		testutil.Unavailable(t, "no cgroup v2 hierarchy: "+err.Error())
	}
	c := &cgroups{root: root, base: fmt.Sprintf("/mpsteer-test-%d", os.Getpid())}
	if err := os.Mkdir(c.dir(""), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, n := range append(names, "") {
			dir := c.dir(n)
			os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0o644)
			// The killed processes take a moment to go: the cgroup can be
			// removed once they have.
			if err := testutil.WaitFor(5*time.Second, func() error {
				if err := os.Remove(dir); err != nil && !os.IsNotExist(err) {
					return err
				}
				return nil
			}); err != nil {
				t.Errorf("remove cgroup %s: %v", dir, err)
			}
		}
	})
	for _, n := range names {
		if err := os.Mkdir(c.dir(n), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return c
}

func (c *cgroups) path(name string) string {
	if name == "" {
		return c.base
	}
	return c.base + "/" + name
}

func (c *cgroups) dir(name string) string { return filepath.Join(c.root, c.path(name)) }

func (c *cgroups) id(t *testing.T, name string) uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat(c.dir(name), &st); err != nil {
		t.Fatal(err)
	}
	return st.Ino
}

// run starts a command in cgroup name and namespace ns (the shell joins
// the cgroup, then becomes the command); its output goes to out.
func (c *cgroups) run(t *testing.T, name, ns string, out *bytes.Buffer, args ...string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command("sh", append([]string{"-c", `cg=$1; ns=$2; shift 2; echo $$ > "$cg/cgroup.procs" && exec ip netns exec "$ns" "$@"`, "sh", c.dir(name), ns}, args...)...)
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			cmd.Process.Kill()
			cmd.Wait()
		}
	})
	return cmd
}

// Scripts for a kernel that cannot switch applications to MPTCP: Python's
// http.server on an MPTCP socket, and a client that fetches a file over
// one, slowly (about 6 MB/s, less by the factor argv[3]).
const (
	mptcpServerPy = `import http.server, os, socket, sys
os.chdir(sys.argv[2])
srv = http.server.ThreadingHTTPServer(("0.0.0.0", int(sys.argv[1])), http.server.SimpleHTTPRequestHandler, bind_and_activate=False)
srv.socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
srv.server_bind(); srv.server_activate(); srv.serve_forever()
`
	mptcpClientPy = `import socket, sys, time
s = socket.socket(socket.AF_INET, socket.SOCK_STREAM, 262)
s.connect((sys.argv[1], int(sys.argv[2])))
s.sendall(b"GET /big HTTP/1.0\r\nHost: lab\r\n\r\n")
n = 0
while True:
    b = s.recv(65536)
    if not b:
        break
    n += len(b)
    time.sleep(0.01 * float(sys.argv[3]))
print(n)
`
)

// Per-application policy in a lab host with two paths. The client's
// policy (prefer the second path; under the userspace path manager it
// opens the subflow there) is scoped to cgroup app; a process in cgroup
// other runs alongside. With a kernel that has the update_socket_protocol hook the
// applications are unmodified (curl against Python's http.server, and
// iperf3): the daemons' mptcpize makes app's and the server's sockets
// MPTCP, other's stay TCP. Without it (some VMs refuse BPF trampolines)
// both cgroups' clients and the server open MPTCP sockets themselves, and
// the test shows the scoping alone: only app's connection gets a second
// subflow and decisions.
func TestPerApplicationPolicyInTheLab(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireTool(t, "python3")
	testutil.RequireTool(t, "curl")
	testutil.RequireTool(t, "iperf3")
	mptcpizeErr := mptcpize.Supported()
	if mptcpizeErr != nil {
		t.Logf("unmodified applications cannot be switched to MPTCP here; the clients and the server open MPTCP sockets themselves: %v", mptcpizeErr)
	}
	unmodified := mptcpizeErr == nil
	h := testutil.TwoHosts(t, 2)
	if err := netnsutil.SetPathManager(h.Client, "userspace"); err != nil {
		t.Fatal(err)
	}
	if err := testutil.DialPM(t, h.Server).SetLimits(pm.Limits{Subflows: 4}); err != nil {
		t.Fatal(err)
	}
	cg := newCgroups(t, "app", "other", "srv")
	app, other := cg.path("app"), cg.path("other")

	dir := t.TempDir()
	const size = 12 << 20
	if err := os.WriteFile(filepath.Join(dir, "big"), bytes.Repeat([]byte("mpsteer!"), size/8), 0o644); err != nil {
		t.Fatal(err)
	}
	// Under the userspace path manager prefer opens the subflow on the
	// preferred path itself.
	srvConfig, cliConfig := "", fmt.Sprintf("policies:\n  - {name: prefer, paths: [%s], cgroup: %s}\n", h.Dev(2), app)
	if unmodified {
		srvConfig = fmt.Sprintf("mptcpize: [%s]\n", cg.path("srv"))
		cliConfig += fmt.Sprintf("mptcpize: [%s]\n", app)
	} else {
		srvConfig = "policies: []\n"
		for name, src := range map[string]string{"server.py": mptcpServerPy, "client.py": mptcpClientPy} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	srvD := testutil.StartDaemon(t, h.Server, srvConfig)
	cli := testutil.StartDaemon(t, h.Client, cliConfig)

	var srvOut bytes.Buffer
	srvAddr := h.ServerAddr(1).String()
	if unmodified {
		cg.run(t, "srv", h.Server, &srvOut, "python3", "-m", "http.server", "8080", "--bind", "0.0.0.0", "--directory", dir)
		cg.run(t, "srv", h.Server, &srvOut, "iperf3", "-s", "-p", "5201")
		cg.run(t, "srv", h.Server, &srvOut, "iperf3", "-s", "-p", "5202")
	} else {
		cg.run(t, "srv", h.Server, &srvOut, "python3", filepath.Join(dir, "server.py"), "8080", dir)
		cg.run(t, "srv", h.Server, &srvOut, "iperf3", "-s", "-p", "5202")
	}
	waitFor(t, 5*time.Second, "the servers listen", func() (bool, string) {
		out, _ := exec.Command("ip", "netns", "exec", h.Server, "ss", "-Htln").CombinedOutput()
		s := string(out)
		return strings.Contains(s, ":8080") && strings.Contains(s, ":5202"), s + srvOut.String()
	})

	// The transfers, at once: app fetches a file (and, unmodified, runs
	// iperf3 too); other runs iperf3, and in the fallback also fetches
	// the file over MPTCP.
	// They last about 3 s, stretched by the time scale: the test looks at
	// their sockets while they run, later where everything runs slower.
	scale := timescale.Scaled(time.Second).Seconds()
	secs, rate := fmt.Sprint(int(math.Ceil(3*scale))), fmt.Sprintf("%dK", int(4096/scale))
	var appOut, appOut2, otherOut, otherOut2 bytes.Buffer
	var cmds []*exec.Cmd
	url := "http://" + srvAddr + ":8080/big"
	if unmodified {
		cmds = append(cmds,
			cg.run(t, "app", h.Client, &appOut, "curl", "-sS", "--limit-rate", rate, "-o", "/dev/null", "-w", "%{size_download}", url),
			cg.run(t, "app", h.Client, &appOut2, "iperf3", "-c", srvAddr, "-p", "5201", "-t", secs, "-b", "40M"))
	} else {
		cmds = append(cmds,
			cg.run(t, "app", h.Client, &appOut, "python3", filepath.Join(dir, "client.py"), srvAddr, "8080", fmt.Sprint(scale)),
			cg.run(t, "other", h.Client, &otherOut2, "python3", filepath.Join(dir, "client.py"), srvAddr, "8080", fmt.Sprint(scale)))
	}
	cmds = append(cmds, cg.run(t, "other", h.Client, &otherOut, "iperf3", "-c", srvAddr, "-p", "5202", "-t", secs, "-b", "40M"))

	appID, otherID := cg.id(t, "app"), cg.id(t, "other")
	s := sampler(t, h.Client)
	var st *api.Status
	steered := func() (bool, string) {
		var err error
		if st, err = cli.Client.Status(); err != nil {
			return false, err.Error()
		}
		var appConns, good int
		for _, c := range st.Connections {
			if c.CgroupID != appID {
				continue
			}
			appConns++
			if c.Cgroup != app || len(c.Subflows) < 2 {
				continue
			}
			ok := true
			for _, sf := range c.Subflows {
				d := sf.Decision
				wantBackup := !strings.HasPrefix(sf.Local, h.ClientAddr(2).String()+":")
				if d == nil || d.Policy != "prefer@"+app || d.Backup != wantBackup {
					ok = false
				}
			}
			if ok {
				good++
			}
		}
		want := 1
		if unmodified {
			want = 2 // curl's and iperf3's data connection (its control connection is idle)
		}
		return appConns > 0 && good >= want, fmt.Sprintf("%d of app's %d connections on two paths and steered; status %+v", good, appConns, st.Connections)
	}
	waitFor(t, 5*time.Second, "app's connections given a subflow on the preferred path and steered by prefer", steered)

	// What the kernel's own tools say meanwhile: the MPTCP sockets with
	// their cgroups (ss -M), and the namespace's MPTCP counters.
	// (nsenter, not ip netns exec: ss finds the cgroup paths through the
	// cgroup2 mount, which ip netns exec's fresh /sys does not have.)
	ssOut, err := exec.Command("nsenter", "--net="+filepath.Join(netnsutil.Dir, h.Client), "ss", "-HnM", "--cgroup").CombinedOutput()
	if err != nil {
		t.Fatalf("ss: %v: %s", err, ssOut)
	}
	if !strings.Contains(string(ssOut), app) || unmodified && strings.Contains(string(ssOut), other) {
		t.Errorf("ss -M --cgroup: want app's MPTCP sockets%s:\n%s", map[bool]string{true: " and none of other's"}[unmodified], ssOut)
	}
	nstat, _ := exec.Command("ip", "netns", "exec", h.Client, "nstat", "-asz", "MPTcpExtMPCapableSYNTX", "MPTcpExtMPCapableSYNACKRX", "MPTcpExtMPJoinSynTx", "MPTcpExtMPJoinSynAckRx").CombinedOutput()
	t.Logf("client's MPTCP sockets (ss -HnM --cgroup):\n%s\nclient's counters (nstat):\n%s", ssOut, nstat)

	// Meanwhile other's: untouched. Unmodified, plain TCP; in the
	// fallback, MPTCP on its initial subflow alone, with no decision.
	tcp, err := s.TCP()
	if err != nil {
		t.Fatal(err)
	}
	var appSockets, otherSockets int
	for _, sf := range tcp {
		switch sf.CgroupID {
		case appID:
			appSockets++
			if !sf.MPTCP {
				t.Errorf("app's socket %s→%s is plain TCP", sf.Local, sf.Remote)
			}
		case otherID:
			otherSockets++
			if sf.MPTCP && (unmodified || sf.Remote.Port() == 5202) {
				t.Errorf("other's socket %s→%s is MPTCP", sf.Local, sf.Remote)
			}
		}
	}
	if appSockets == 0 || otherSockets == 0 {
		t.Fatalf("sockets: %d of app's, %d of other's", appSockets, otherSockets)
	}
	for _, c := range st.Connections {
		if c.CgroupID != otherID {
			continue
		}
		if c.Cgroup != "" || len(c.Subflows) != 1 || c.Subflows[0].Decision != nil || len(c.Actions) > 0 {
			t.Errorf("other's connection was steered: %+v", c)
		}
	}
	for _, a := range st.Actions {
		if a.Policy != "" && !strings.HasSuffix(a.Policy, "@"+app) {
			t.Errorf("an action by %q (policies are scoped to %s)", a.Policy, app)
		}
	}

	for i, c := range cmds {
		if err := c.Wait(); err != nil {
			t.Errorf("client %d: %v\n%s%s%s%s", i, err, appOut.String(), appOut2.String(), otherOut.String(), otherOut2.String())
		}
	}
	// curl says how many bytes it fetched; the fallback's client counts
	// the HTTP header too.
	var n int
	fmt.Sscan(strings.TrimSpace(appOut.String()), &n)
	if n < size {
		t.Errorf("app's download: %q bytes, want %d", appOut.String(), size)
	}
	if unmodified {
		for _, d := range []*testutil.Daemon{cli, srvD} {
			st, err := d.Client.Status()
			if err != nil {
				t.Fatal(err)
			}
			if st.Mptcpize == nil || st.Mptcpize.Program["switched"] == 0 || !st.Mptcpize.Cgroups[0].Present {
				t.Errorf("mptcpize status %+v", st.Mptcpize)
			}
		}
	}
	t.Logf("app %s: %d sockets, all MPTCP; other %s: %d sockets; unmodified applications: %v", app, appSockets, other, otherSockets, unmodified)
}

// mptcpize through policy apply: all or nothing. Where the kernel can load
// the program, a config that also names a missing chain device is refused
// and leaves no program behind, and a good one switches it on; where it
// cannot, the config is refused naming the key and why, and the running
// config stays.
func TestMptcpizeReloadIsAllOrNothing(t *testing.T) {
	testutil.RequireLab(t)
	h := testutil.TwoHosts(t, 1)
	d := testutil.StartDaemon(t, h.Client, "policies: []\n")
	file := filepath.Join(t.TempDir(), "new.yaml")
	good := "mptcpize: [/system.slice/mpsteer-test-none.service]\npolicies: [{name: backup, paths: [" + h.Dev(1) + "], cgroup: /system.slice/mpsteer-test-none.service}]\n"
	if err := mptcpize.Supported(); err != nil {
		_, aerr := d.Client.Apply(api.ApplyRequest{File: file, Config: good})
		if aerr == nil || !strings.Contains(aerr.Error(), file+":1: mptcpize") {
			t.Fatalf("apply on a kernel that cannot load the program: %v", aerr)
		}
	} else {
		bad := good + "chains: [{dev: nosuchdev0, hook: ingress, select: 'type(data-ack)', act: set_backup}]\n"
		if _, err := d.Client.Apply(api.ApplyRequest{File: file, Config: bad}); err == nil {
			t.Fatal("a config with a missing device was applied")
		}
		if st, _ := d.Client.Status(); st == nil || st.Mptcpize != nil {
			t.Fatalf("refused, yet mptcpize runs: %+v", st)
		}
		if _, err := d.Client.Apply(api.ApplyRequest{File: file, Config: good}); err != nil {
			t.Fatal(err)
		}
		st, err := d.Client.Status()
		if err != nil || st.Mptcpize == nil || len(st.Mptcpize.Cgroups) != 1 || st.Mptcpize.Cgroups[0].Present {
			t.Fatalf("status after apply: %+v, %v", st, err)
		}
	}
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	if mptcpize.Supported() != nil && (st.Mptcpize != nil || len(st.Policies) != 0) {
		t.Fatalf("the refused config left something running: %+v", st)
	}
}
