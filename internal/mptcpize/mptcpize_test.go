package mptcpize_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/mptcpize"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// protocolIn makes a TCP stream socket (protocol 0, and IPPROTO_TCP) in a
// process of cgroup cg and namespace ns, and returns the protocols the
// kernel gave them (SO_PROTOCOL: 6 TCP, 262 MPTCP).
func protocolIn(t *testing.T, cg, ns string) string {
	t.Helper()
	py := `import socket
a = socket.socket(socket.AF_INET, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
b = socket.socket(socket.AF_INET6, socket.SOCK_STREAM, socket.IPPROTO_TCP)
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
print(a.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL), b.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL), c.getsockopt(socket.SOL_SOCKET, socket.SO_PROTOCOL))`
	cmd := exec.Command("sh", "-c", `echo $$ > "$1/cgroup.procs" && exec ip netns exec "$2" python3 -c "$3"`, "sh", cg, ns, py)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func TestSwitchesStreamSocketsOfTheScopedCgroupOnly(t *testing.T) {
	testutil.RequireRoot(t, "loading a tracing BPF program and making cgroups")
	testutil.RequireTool(t, "python3")
	testutil.RequireTool(t, "ip")
	// A kernel without the hook (or that refuses BPF trampolines, as
	// some VMs' do) is not a broken setup: nothing here can run.
	testutil.RequireFeature(t, kernelfeat.UpdateSocketProto)
	root, err := bpfutil.Cgroup2Root()
	if err != nil {
		testutil.Unavailable(t, "no cgroup v2 hierarchy: "+err.Error())
	}
	base := filepath.Join(root, fmt.Sprintf("mpsteer-test-%d", os.Getpid()))
	in, out, below := filepath.Join(base, "in"), filepath.Join(base, "out"), filepath.Join(base, "in", "below")
	for _, d := range []string{base, in, out, below} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// A cgroup is removed once its processes are gone (they exit with
	// each command); deepest first.
	t.Cleanup(func() {
		for _, d := range []string{below, in, out, base} {
			if err := os.Remove(d); err != nil {
				t.Errorf("remove cgroup: %v", err)
			}
		}
	})
	ns := fmt.Sprintf("mpz%d", os.Getpid())
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(ns) })
	if err := netnsutil.Sysctl(ns, "net.mptcp.enabled", "1"); err != nil {
		t.Fatal(err)
	}
	var cookie uint64
	if err := netnsutil.Do(ns, func() error { var err error; cookie, err = bpfutil.NetNSCookie(); return err }); err != nil {
		t.Fatal(err)
	}
	s, err := mptcpize.New(cookie)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var st syscall.Stat_t
	if err := syscall.Stat(in, &st); err != nil {
		t.Fatal(err)
	}
	if err := s.Set([]uint64{st.Ino}); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		cg, ns, want, what string
	}{
		{in, ns, "262 262 17", "the scoped cgroup"},
		{below, ns, "262 262 17", "a cgroup below the scoped one"},
		{out, ns, "6 6 17", "another cgroup"},
	} {
		if got := protocolIn(t, c.cg, c.ns); got != c.want {
			t.Errorf("%s: protocols %q, want %q", c.what, got, c.want)
		}
	}
	// Another network namespace is not the daemon's: left alone.
	other := ns + "-o"
	if err := netnsutil.Create(other); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(other) })
	if got := protocolIn(t, in, other); got != "6 6 17" {
		t.Errorf("the scoped cgroup in another namespace: protocols %q, want TCP", got)
	}
	if st := s.Stats(); st["switched"] != 4 {
		t.Errorf("stats %v, want 4 switched", st)
	}
	// Out of scope again, and detached: TCP.
	if err := s.Set(nil); err != nil {
		t.Fatal(err)
	}
	if got := protocolIn(t, in, ns); got != "6 6 17" {
		t.Errorf("after the scope is removed: protocols %q, want TCP", got)
	}
}
