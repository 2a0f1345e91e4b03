package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"mpsteer/internal/lab/labtest"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath/spread"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/traffic"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// A tenants world: two hypervisors, two 50 Mbit/s links, the measured VM
// pair's connections get two subflows from the client VM's one address.
const tenantsWorld = `
tenants:
  links:
    - {name: phy1, rate: 50mbit, delay: 1ms, queue: 100pkt}
    - {name: phy2, rate: 50mbit, delay: 1ms, queue: 100pkt}
  vms:
    - {name: vm1, on: hv1}
    - {name: vm2, on: hv2}
  measure: {client: vm1, server: vm2, subflows: 2}
traffic: [{type: bulk, duration: 2s}]
`

func spreadConfig(peer int, extra string) string {
	return fmt.Sprintf("policies: [{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: 10.250.1.%d}, {dev: phy2, gateway: 10.250.2.%d}]%s}]\n", peer, peer, extra)
}

// linkBytes reads the emulator's byte counters of the physical links:
// up is hv1 → hv2, down hv2 → hv1.
func linkBytes(t *testing.T, w *labworld.World) (up, down map[string]uint64) {
	t.Helper()
	resp, err := labworld.Control(w.Dir, labworld.Request{Op: "stats"})
	if err != nil {
		t.Fatal(err)
	}
	up, down = map[string]uint64{}, map[string]uint64{}
	for name, st := range resp.Links {
		up[name], down[name] = st.Up.Stats.Bytes, st.Down.Stats.Bytes
	}
	return up, down
}

// vmUpload runs an MPTCP upload from vm1 to vm2 for d and returns how
// many subflows the connection had and the bytes each link carried up
// and down meanwhile.
func vmUpload(t *testing.T, w *labworld.World, d time.Duration) (subflows int, up, down map[string]uint64) {
	t.Helper()
	vm1, vm2 := w.Tenants.VM("vm1"), w.Tenants.VM("vm2")
	up0, down0 := linkBytes(t, w)
	s := testutil.Sampler(t, vm1.NetNS)
	b := &traffic.Bulk{ClientNS: vm1.NetNS, ServerNS: vm2.NetNS, Server: netip.AddrPortFrom(vm2.Addr, 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: d}
	done := make(chan error, 1)
	go func() {
		res, err := b.Run(context.Background())
		if err == nil && !res.MPTCP {
			err = fmt.Errorf("the connection fell back to TCP")
		}
		done <- err
	}()
	for {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			up1, down1 := linkBytes(t, w)
			up, down = map[string]uint64{}, map[string]uint64{}
			for n := range up1 {
				up[n], down[n] = up1[n]-up0[n], down1[n]-down0[n]
			}
			return subflows, up, down
		case <-time.After(100 * time.Millisecond):
			sfs, _ := s.Subflows()
			n := 0
			for _, sf := range sfs {
				if sf.Token != 0 && sf.State == 1 && sf.Remote.Addr() == vm2.Addr {
					n++
				}
			}
			subflows = max(subflows, n)
		}
	}
}

func shareOf(m map[string]uint64, k string) float64 {
	var total uint64
	for _, v := range m {
		total += v
	}
	if total == 0 {
		return 0
	}
	return float64(m[k]) / float64(total)
}

// spreadUplinks reads the spread policy's counters from a daemon's status.
func spreadUplinks(t *testing.T, d *testutil.Daemon) []spread.UplinkStats {
	t.Helper()
	st, err := d.Client.Status()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range st.Policies {
		if p.Name != "spread" {
			continue
		}
		b, _ := json.Marshal(p.Status)
		var ps struct {
			Installed bool         `json:"installed"`
			Datapath  spread.Stats `json:"datapath"`
		}
		if err := json.Unmarshal(b, &ps); err != nil || !ps.Installed {
			t.Fatalf("spread status %s: %v", b, err)
		}
		return ps.Datapath.Uplinks
	}
	t.Fatal("no spread policy in the status")
	return nil
}

// Use case 1 of emptcp-full-extensibility: a VM's MPTCP connection has two
// subflows it cannot place (one address, one NIC). The hypervisor's one
// default route sends both over phy1; with the spread policy on the
// hypervisors, each leaves by its own uplink, and the replies (ACKs) come
// back on the link their subflow went out on.
func TestSpreadSendsEachSubflowOutOfItsOwnUplink(t *testing.T) {
	// spread's program attaches through TCX alone (the daemon refuses it
	// on an older kernel: its kernel check).
	testutil.RequireFeature(t, kernelfeat.TCX)
	w := labtest.World(t, tenantsWorld, "mptcp")
	n, up, _ := vmUpload(t, w, 1500*time.Millisecond)
	t.Logf("without spread: %d subflows, hv1→hv2 bytes %v", n, up)
	if n != 2 {
		t.Fatalf("the connection had %d subflows, want 2 (the server VM announces a second port)", n)
	}
	if shareOf(up, "phy2") > 0.01 {
		t.Fatalf("without the operator's policy phy2 carried %.0f%% of the bytes (%v); the default route is phy1", 100*shareOf(up, "phy2"), up)
	}

	d1 := testutil.StartDaemon(t, w.Host("hv1").NetNS, spreadConfig(2, ""))
	d2 := testutil.StartDaemon(t, w.Host("hv2").NetNS, spreadConfig(1, ""))
	n, up, down := vmUpload(t, w, 1500*time.Millisecond)
	t.Logf("with spread: %d subflows, hv1→hv2 bytes %v, hv2→hv1 bytes %v", n, up, down)
	if n != 2 {
		t.Fatalf("the connection had %d subflows, want 2", n)
	}
	for _, l := range []string{"phy1", "phy2"} {
		if s := shareOf(up, l); s < 0.3 {
			t.Errorf("with spread %s carried %.0f%% of the upload (%v); want each link to carry one subflow", l, 100*s, up)
		}
		if s := shareOf(down, l); s < 0.2 {
			t.Errorf("with spread %s carried %.0f%% of the ACKs back (%v); want each subflow's replies on its own link", l, 100*s, down)
		}
	}
	// hv1 gave the connection to phy1 and its join to phy2; hv2 learned
	// both subflows at the uplinks they came in on.
	u1, u2 := spreadUplinks(t, d1), spreadUplinks(t, d2)
	if len(u1) != 2 || u1[0].Flows+u1[1].Flows != 1 || u1[0].Joins+u1[1].Joins != 1 || u1[0].Flows+u1[0].Joins != 1 || u1[0].Packets == 0 || u1[1].Packets == 0 {
		t.Errorf("hv1's uplinks: %+v; want one subflow on each", u1)
	}
	if len(u2) != 2 || u2[0].Learned != 1 || u2[1].Learned != 1 || u2[0].Packets == 0 || u2[1].Packets == 0 {
		t.Errorf("hv2's uplinks: %+v; want one learned subflow on each, and the replies marked", u2)
	}
}

// fwmarkRules lists a namespace's rules that route by mark.
func fwmarkRules(t *testing.T, ns string) []string {
	t.Helper()
	h, err := netnsutil.Netlink(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	rules, err := h.RuleList(netlink.FAMILY_V4)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, r := range rules {
		if r.Mark != 0 {
			out = append(out, fmt.Sprintf("%d: fwmark %#x table %d", r.Priority, r.Mark, r.Table))
		}
	}
	for _, table := range []int{spread.DefaultTableBase, spread.DefaultTableBase + 1} {
		routes, err := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		if err != nil {
			t.Fatal(err)
		}
		for _, rt := range routes {
			out = append(out, fmt.Sprintf("table %d: %s", table, rt))
		}
	}
	return out
}

// The daemon installs all of the datapath or nothing; killed, it leaves
// traffic flowing on the default route (the programs go with it, the
// rules left behind match marks nobody sets) and the next daemon replaces
// what it left; a clean exit removes everything.
func TestSpreadAllOrNothingFailOpenAndCleanExit(t *testing.T) {
	w := labtest.World(t, tenantsWorld, "mptcp")
	hv1 := w.Host("hv1").NetNS

	// The second uplink's gateway is not on its link: the route fails
	// after the first one was added, and nothing may be left.
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.yaml")
	os.WriteFile(bad, []byte("policies: [{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: 10.250.1.2}, {dev: phy2, gateway: 10.9.9.9}]}]\n"), 0o644)
	cmd := exec.Command("ip", "netns", "exec", hv1, testutil.Binary(t), "daemon", "--config", bad, "--socket", filepath.Join(dir, "d.sock"))
	out, err := cmd.CombinedOutput()
	if err == nil || !strings.Contains(string(out), bad+":1: policies[0]: uplink phy2: route default via 10.9.9.9 dev phy2 in table 5351") {
		t.Fatalf("daemon with an unreachable gateway: err %v, output:\n%s", err, out)
	}
	if left := fwmarkRules(t, hv1); len(left) > 0 {
		t.Fatalf("a refused config left %v", left)
	}

	d := testutil.StartDaemon(t, hv1, spreadConfig(2, ""))
	installed := fwmarkRules(t, hv1)
	if len(installed) != 4 {
		t.Fatalf("installed %v, want two rules and two routes", installed)
	}
	d.Stop(syscall.SIGKILL)
	if left := fwmarkRules(t, hv1); len(left) != 4 {
		t.Errorf("after a kill: %v (the rules and routes stay, harmless)", left)
	}
	n, up, _ := vmUpload(t, w, time.Second)
	if up["phy1"] == 0 || shareOf(up, "phy2") > 0.01 || n != 2 {
		t.Fatalf("after the daemon was killed: %d subflows, bytes %v; want traffic on the default route only", n, up)
	}

	d = testutil.StartDaemon(t, hv1, spreadConfig(2, ""))
	if again := fwmarkRules(t, hv1); strings.Join(again, "\n") != strings.Join(installed, "\n") {
		t.Errorf("the next daemon left %v, want %v (replaced, not added twice)", again, installed)
	}
	// A reload that cannot be installed is refused and the running
	// datapath stays; one that can replaces it.
	badReload := filepath.Join(dir, "reload.yaml")
	if _, err := d.Client.Apply(api.ApplyRequest{File: badReload, Config: "policies: [{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: 10.250.1.2}, {dev: phy2, gateway: 10.9.9.9}]}]"}); err == nil ||
		!strings.Contains(err.Error(), badReload+":1: policies[0]: uplink phy2") {
		t.Fatalf("a reload with an unreachable gateway: %v", err)
	}
	if now := fwmarkRules(t, hv1); strings.Join(now, "\n") != strings.Join(installed, "\n") {
		t.Errorf("after a refused reload: %v, want %v", now, installed)
	}
	if u := spreadUplinks(t, d); len(u) != 2 || u[1].Gateway != "10.250.2.2" {
		t.Errorf("after a refused reload the datapath is %+v", u)
	}
	if _, err := d.Client.Apply(api.ApplyRequest{File: badReload, Config: spreadConfig(2, ", table_base: 7000, mark_base: 0x7000")}); err != nil {
		t.Fatal(err)
	}
	if now := fwmarkRules(t, hv1); len(now) != 2 || !strings.Contains(strings.Join(now, " "), "fwmark 0x7001 table 7001") {
		t.Errorf("after a reload with new marks and tables: %v (tables %d and %d emptied, rules for 0x7000 and 0x7001)", now, spread.DefaultTableBase, spread.DefaultTableBase+1)
	}
	d.Stop(syscall.SIGTERM)
	if left := fwmarkRules(t, hv1); len(left) > 0 {
		b, _ := os.ReadFile(d.Log)
		t.Fatalf("after a clean exit %v is left\n%s", left, b)
	}
}
