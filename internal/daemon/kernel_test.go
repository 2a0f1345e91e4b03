package daemon_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/api"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/testutil"
)

// What the daemon's kernel check refuses, by feature: a config that asks
// for it, and the key its refusal names.
var kernelRefusals = []struct {
	feature kernelfeat.Name
	exactly bool // the feature itself (spread has no fallback)
	config  string
	key     string
}{
	{kernelfeat.UpdateSocketProto, false, "mptcpize: [/system.slice/mpsteer-test-none.service]\n", ":1: mptcpize"},
	{kernelfeat.TCX, true, "policies: [{name: spread, from: [br0], via: [{dev: phy1}, {dev: phy2}]}]\n", ":1: policies[0] (spread)"},
	{kernelfeat.SockopsRTOMax, false, "policies:\n  - {name: prefer, paths: [lo], rto_max: 5s}\n", ":2: policies[0] (prefer): rto_max"},
	{kernelfeat.StructOpsCC, false, "rate_via: cc\npolicies:\n  - {name: limit, rates: {lo: 10mbit}}\n", ":3: policies[0] (limit): rate_via: cc"},
	{kernelfeat.CoupledCC, false, "coupled: lia\n", ":1: coupled"},
}

// On this kernel, a config that asks for a feature it lacks is refused
// by `mpsteer daemon --config` and by `mpsteer policy apply`, naming the
// feature, the kernel, the Linux version that brought it and the key;
// the running config stays. (Every kernel of the matrix lacks one of
// these: 6.1 most, 6.12 rto_max, this project's host BPF trampolines.)
func TestDaemonRefusesWhatThisKernelLacks(t *testing.T) {
	testutil.RequireRoot(t, "probing the kernel's features")
	r := kernelfeat.Probe()
	tried := 0
	for _, c := range kernelRefusals {
		if c.exactly && r.Has(c.feature) || !c.exactly && r.Usable(c.feature) {
			continue
		}
		tried++
		t.Run(string(c.feature), func(t *testing.T) {
			f := r.Get(c.feature)
			want := func(t *testing.T, what, file, out string) {
				t.Helper()
				for _, s := range []string{file + c.key + " needs " + string(c.feature), "this kernel (" + r.Kernel + ")", "Linux " + f.Since} {
					if !strings.Contains(out, s) {
						t.Errorf("%s: %q lacks %q", what, out, s)
					}
				}
			}
			ns := testutil.Netns(t, "mpst-kref")
			// The devices the configs name (a config naming devices the
			// host lacks is refused for that first).
			for _, pair := range [][2]string{{"br0", "br1"}, {"phy1", "phy2"}} {
				if out, err := exec.Command("ip", "-n", ns, "link", "add", pair[0], "type", "veth", "peer", "name", pair[1]).CombinedOutput(); err != nil {
					t.Fatalf("veth %s: %v: %s", pair[0], err, out)
				}
			}
			dir := t.TempDir()
			file := filepath.Join(dir, "c.yaml")
			if err := os.WriteFile(file, []byte(c.config), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command("ip", "netns", "exec", ns, testutil.Binary(t), "daemon", "--config", file, "--socket", filepath.Join(dir, "d.sock"))
			out, err := cmd.CombinedOutput()
			if err == nil {
				t.Fatalf("the daemon ran a config that needs %s:\n%s", c.feature, out)
			}
			want(t, "daemon --config", file, string(out))
			d := testutil.StartDaemon(t, ns, "policies: []\n")
			applied := filepath.Join(dir, "applied.yaml")
			_, err = d.Client.Apply(api.ApplyRequest{File: applied, Config: c.config})
			if err == nil {
				t.Fatal("policy apply ran it")
			}
			want(t, "policy apply", applied, err.Error())
			if st, err := d.Client.Status(); err != nil || st.Config != d.Config {
				t.Fatalf("after the refusal: %+v, %v", st, err)
			}
		})
	}
	if tried == 0 {
		t.Skipf("this kernel (%s) has every feature the check refuses without", r.Kernel)
	}
}
