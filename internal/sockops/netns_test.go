package sockops

import (
	"os"
	"os/exec"
	"testing"

	"mpsteer/internal/testutil"
)

// vethNS is a namespace of the test's own (testutil.Netns: loopback up,
// removed at the end) with a veth pair d0/d1, both up, and addrs (CIDR)
// on d0, for a test that needs MPTCP and no peer host. It skips where
// the kernel has no MPTCP.
func vethNS(t *testing.T, prefix string, addrs ...string) string {
	t.Helper()
	testutil.RequireRoot(t, "network namespaces and BPF programs")
	testutil.RequireTool(t, "ip")
	if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err != nil {
		testutil.Unavailable(t, "this kernel has no MPTCP")
	}
	ns := testutil.Netns(t, prefix)
	cmds := [][]string{
		{"link", "add", "d0", "type", "veth", "peer", "name", "d1"},
		{"link", "set", "d1", "up"},
	}
	for _, a := range addrs {
		cmds = append(cmds, []string{"addr", "add", a, "dev", "d0"})
	}
	cmds = append(cmds, []string{"link", "set", "d0", "up"})
	for _, args := range cmds {
		if out, err := exec.Command("ip", append([]string{"-n", ns}, args...)...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v\n%s", args, err, out)
		}
	}
	return ns
}
