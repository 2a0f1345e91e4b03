package runner_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// Another tenant's bulk transfer shares the default link with the
// measured pair; only the measured pair's bytes are the variant's goodput.
// With the spread policy on the hypervisors the measured pair's second
// subflow takes the other link.
const tenantsRun = `
name: tenants-short
tenants:
  links:
    - {name: phy1, rate: 20mbit, delay: 1ms}
    - {name: phy2, rate: 20mbit, delay: 1ms}
  vms:
    - {name: vm1, on: hv1}
    - {name: vm2, on: hv2}
    - {name: bg1, on: hv1}
    - {name: bg2, on: hv2}
  measure: {client: vm1, server: vm2, subflows: 2}
traffic:
  - {type: bulk, duration: 2s}
  - {type: udp-flood, pair: [bg1, bg2], from: 0s, to: 2s, rate: 10mbit}
variants:
  - mptcp
  - name: mptcp+spread
    daemon:
      hv1: {policies: [{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: 10.250.1.2}, {dev: phy2, gateway: 10.250.2.2}]}]}
`

func TestLabRunTenants(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-tn", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", writeFile(t, dir, "tenants.yaml", tenantsRun), "--out", out, "--name", name)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	g := map[string]float64{}
	for _, v := range []string{"mptcp", "mptcp+spread"} {
		sum, err := report.ReadSummary(filepath.Join(out, v, "summary.json"))
		if err != nil {
			t.Fatal(err)
		}
		g[v] = sum.GoodputMbit
		t.Logf("%s: %.1f Mbit/s, link shares %v", v, sum.GoodputMbit, sum.Metrics)
		if !sum.MPTCPUsed || sum.CC["client"] == "" || len(sum.Errors) > 0 {
			t.Errorf("%s: summary %+v", v, sum)
		}
	}
	// The flood takes half of phy1: without spread the pair gets the other
	// half, with it that and most of phy2.
	if g["mptcp"] < 6 || g["mptcp"] > 11 {
		t.Errorf("mptcp: %.1f Mbit/s; want about 10 (phy1 less the flood, the flood not counted)", g["mptcp"])
	}
	if g["mptcp+spread"] < 1.6*g["mptcp"] {
		t.Errorf("mptcp+spread: %.1f Mbit/s against %.1f without; want the second link used", g["mptcp+spread"], g["mptcp"])
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
}

// Two measured pairs share the hypervisors' default link: the run's
// goodput is both pairs' bytes, about the link's rate, where one pair alone
// would be counted at about half of it.
const tenantsPairsRun = `
name: tenants-pairs-short
tenants:
  links:
    - {name: phy1, rate: 20mbit, delay: 1ms}
    - {name: phy2, rate: 20mbit, delay: 1ms}
  vms:
    - {name: vm1, on: hv1}
    - {name: vm2, on: hv2}
    - {name: vm3, on: hv1}
    - {name: vm4, on: hv2}
  measure: {subflows: 2, pairs: [{client: vm1, server: vm2}, {client: vm3, server: vm4}]}
traffic:
  - {type: bulk, duration: 3s}
variants:
  - mptcp
`

func TestLabRunTenantsPairs(t *testing.T) {
	testutil.RequireLab(t)
	dir := t.TempDir()
	out := filepath.Join(dir, "out")
	name := fmt.Sprintf("t%d-tp", os.Getpid()%100000)
	cmd := exec.Command(testutil.Binary(t), "lab", "run", writeFile(t, dir, "tenants.yaml", tenantsPairsRun), "--out", out, "--name", name)
	if b, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("lab run: %v\n%s", err, b)
	}
	sum, err := report.ReadSummary(filepath.Join(out, "mptcp", "summary.json"))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("two pairs over one 20 Mbit/s link: %.1f Mbit/s", sum.GoodputMbit)
	if !sum.MPTCPUsed || len(sum.Errors) > 0 {
		t.Errorf("summary %+v", sum)
	}
	if sum.GoodputMbit < 15 || sum.GoodputMbit > 21 {
		t.Errorf("goodput %.1f Mbit/s; want the two pairs' sum, about the link's 20 Mbit/s", sum.GoodputMbit)
	}
	if left, _ := netnsutil.List(world.NSPrefix + name + "-"); len(left) > 0 {
		t.Fatalf("namespaces left after the run: %v", left)
	}
}
