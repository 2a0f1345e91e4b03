package world_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/testutil"
)

func tenants(attach string) string {
	return `
tenants:
  attach: ` + attach + `
  links:
    - {name: phy1, rate: 50mbit, delay: 1ms}
    - {name: phy2, rate: 50mbit, delay: 1ms}
  vms:
    - {name: vm1, on: hv1, cc: reno}
    - {name: bg1, on: hv1}
    - {name: vm2, on: hv2}
  measure: {client: vm1, server: vm2, subflows: 3}
traffic: [{type: bulk, duration: 2s}]
variants:
  - mptcp
  - tcp
  - {name: us, path_manager: {server: userspace}}
`
}

func TestPlanTenants(t *testing.T) {
	s := parse(t, tenants("bridge"))
	p, err := world.NewPlan("plan", s, s.Variant("mptcp"))
	if err != nil {
		t.Fatal(err)
	}
	ti := p.Tenants
	if ti == nil || p.ClientRole() != "vm1" || p.ServerRole() != "vm2" || p.Role("client") != "vm1" || p.Role("hv2") != "hv2" {
		t.Fatalf("roles: %+v", ti)
	}
	vm1, bg1, vm2 := ti.VM("vm1"), ti.VM("bg1"), ti.VM("vm2")
	if vm1.Addr != netip.MustParseAddr("10.1.0.1") || bg1.Addr != netip.MustParseAddr("10.1.0.2") || vm2.Addr != netip.MustParseAddr("10.2.0.1") ||
		vm1.Gateway != netip.MustParseAddr("10.1.0.254") || vm1.NetNS != "mps-plan-vm1" || vm1.HostDev != "vm1" {
		t.Fatalf("VMs %+v", ti.VMs)
	}
	if len(p.Bridges) != 2 || p.Bridges[1].Host != "hv2" || p.Bridges[1].Addr.String() != "10.2.0.254/24" {
		t.Errorf("bridges %+v", p.Bridges)
	}
	if len(p.Links) != 2 || p.Links[1].A.Addr.String() != "10.250.2.1/24" || p.Links[1].B.Host != "hv2" || p.CoreLink("phy2") == nil {
		t.Errorf("links %+v", p.Links)
	}
	var defaults []string
	for _, r := range p.Routes {
		if r.Dst.Bits() == 0 {
			defaults = append(defaults, r.Host+" via "+r.Via.String()+" dev "+strings.Join(r.Devs, ","))
		}
	}
	if got := strings.Join(defaults, "; "); got != "hv1 via 10.250.1.2 dev phy1; hv2 via 10.250.1.1 dev phy1; vm1 via 10.1.0.254 dev eth0; bg1 via 10.1.0.254 dev eth0; vm2 via 10.2.0.254 dev eth0" {
		t.Errorf("default routes: %s", got)
	}
	// Three subflows: the server announces its address on two more ports.
	if len(p.Endpoints) != 2 || p.Endpoints[0].Host != "vm2" || p.Endpoints[0].Port != world.AnnouncePortBase || p.Endpoints[1].Port != world.AnnouncePortBase+1 {
		t.Errorf("endpoints %+v", p.Endpoints)
	}
	if h := p.Host("vm1"); h.CC != "reno" || h.PathManager != scenario.PMKernel || p.Host("hv1").Sysctls["net.ipv4.ip_forward"] != "1" {
		t.Errorf("hosts %+v", p.Hosts)
	}
	if len(p.Paths) != 1 || p.Paths[0].Client.Addr != vm1.Addr || p.Paths[0].Server.Addr != vm2.Addr {
		t.Errorf("paths %+v", p.Paths)
	}
	if tp, err := world.NewPlan("plan", s, s.Variant("tcp")); err != nil || len(tp.Endpoints) != 0 || tp.Tenants.Subflows != 1 {
		t.Errorf("tcp plan: %v, %+v", err, tp)
	}
	if _, err := world.NewPlan("plan", s, s.Variant("us")); err == nil || !strings.Contains(err.Error(), "subflows: 3 is made by the server VM's kernel path manager") {
		t.Errorf("userspace server with subflows: %v", err)
	}

	vs := parse(t, tenants("veth"))
	vp, err := world.NewPlan("plan", vs, vs.Variant("mptcp"))
	if err != nil {
		t.Fatal(err)
	}
	if v := vp.Tenants.VM("bg1"); len(vp.Bridges) != 0 || v.Addr != netip.MustParseAddr("10.1.2.1") || v.Gateway != netip.MustParseAddr("10.1.2.254") {
		t.Errorf("veth plan: bridges %+v, bg1 %+v", vp.Bridges, v)
	}
}

// Several measured pairs: each server VM announces its address on the
// extra ports; the first pair is the one the world's path names.
func TestPlanTenantsPairs(t *testing.T) {
	s := parse(t, `
tenants:
  links: [{name: phy1, rate: 50mbit}, {name: phy2, rate: 50mbit}]
  vms: [{name: vm1, on: hv1}, {name: vm2, on: hv2}, {name: vm3, on: hv1}, {name: vm4, on: hv2}]
  measure: {subflows: 3, pairs: [{client: vm1, server: vm2}, {client: vm3, server: vm4}]}
traffic: [{type: bulk, duration: 2s}]
variants: [mptcp, tcp]
`)
	p, err := world.NewPlan("plan", s, s.Variant("mptcp"))
	if err != nil {
		t.Fatal(err)
	}
	var eps []string
	for _, e := range p.Endpoints {
		eps = append(eps, fmt.Sprintf("%s %s:%d", e.Host, e.Addr, e.Port))
	}
	if got := strings.Join(eps, ", "); got != "vm2 10.2.0.1:5301, vm2 10.2.0.1:5302, vm4 10.2.0.2:5301, vm4 10.2.0.2:5302" {
		t.Errorf("endpoints: %s", got)
	}
	if p.ClientRole() != "vm1" || p.ServerRole() != "vm2" || len(p.Tenants.Pairs) != 2 || p.Tenants.Pairs[1] != [2]string{"vm3", "vm4"} {
		t.Errorf("roles %s → %s, pairs %v", p.ClientRole(), p.ServerRole(), p.Tenants.Pairs)
	}
	if tp, err := world.NewPlan("plan", s, s.Variant("tcp")); err != nil || len(tp.Endpoints) != 0 {
		t.Errorf("tcp plan: %v, endpoints %+v", err, tp.Endpoints)
	}
}

// Both ways of attaching VMs carry a VM's MPTCP connection, with the
// subflows the server announces, over the hypervisors' default link; the
// world goes away without a trace.
func TestTenantsWorld(t *testing.T) {
	testutil.RequireLab(t)
	for _, attach := range []string{"bridge", "veth"} {
		t.Run(attach, func(t *testing.T) {
			w := up(t, parse(t, tenants(attach)), "mptcp", labName(t, "tn"+attach[:1]))
			vm1, vm2 := w.Tenants.VM("vm1"), w.Tenants.VM("vm2")
			eps, err := testutil.DialPM(t, vm2.NetNS).Endpoints()
			if err != nil || len(eps) != 2 || eps[0].Port != world.AnnouncePortBase || eps[0].Addr != vm2.Addr {
				t.Fatalf("server VM endpoints %v, %v", eps, err)
			}
			s := testutil.Sampler(t, vm1.NetNS)
			b := &traffic.Bulk{ClientNS: vm1.NetNS, ServerNS: vm2.NetNS, Server: netip.AddrPortFrom(vm2.Addr, 5201), Proto: traffic.MPTCP, Upload: true, Duration: time.Minute}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() { _, err := b.Run(ctx); done <- err }()
			// The connection's subflows to the server's three ports, and
			// 2 MiB carried (what the links' counters are checked for).
			err = testutil.WaitFor(10*time.Second, func() error {
				sfs, err := s.Subflows()
				if err != nil {
					return err
				}
				ports := map[uint16]bool{}
				for _, sf := range sfs {
					if sf.Token != 0 && sf.Remote.Addr() == vm2.Addr && sf.Local.Addr() == vm1.Addr {
						ports[sf.Remote.Port()] = true
					}
				}
				if len(ports) != 3 {
					return fmt.Errorf("subflows to the server's ports %v, want 5201, 5301, 5302", ports)
				}
				if n := b.Meter.Bytes(); n < 2<<20 {
					return fmt.Errorf("%d B carried, want 2 MiB", n)
				}
				return nil
			})
			cancel()
			if uerr := <-done; uerr != nil && !errors.Is(uerr, context.Canceled) {
				t.Fatal(uerr)
			}
			if err != nil {
				t.Error(err)
			}
			resp, err := world.Control(w.Dir, world.Request{Op: "stats"})
			if err != nil {
				t.Fatal(err)
			}
			if up1, up2 := resp.Links["phy1"].Up.Stats.Bytes, resp.Links["phy2"].Up.Stats.Bytes; up1 < 1<<20 || up2 > 0 {
				t.Errorf("hv1→hv2: phy1 %d B, phy2 %d B; want everything on the default route (phy1)", up1, up2)
			}
		})
	}
}

// spread: ecmp in a tenants world: each hypervisor has one default route
// over every link, flows hashed by 5-tuple; many connections of one VM
// pair use both links.
func TestTenantsECMP(t *testing.T) {
	src := strings.Replace(tenants("bridge"), "  - tcp\n", "  - tcp\n  - {name: ecmp, spread: ecmp}\n", 1)
	s := parse(t, src)
	p, err := world.NewPlan("plan", s, s.Variant("ecmp"))
	if err != nil {
		t.Fatal(err)
	}
	var defaults []string
	for _, r := range p.Routes {
		if r.Dst.Bits() == 0 && strings.HasPrefix(r.Host, "hv") {
			defaults = append(defaults, r.Host+" dev "+strings.Join(r.Devs, ","))
		}
	}
	if got := strings.Join(defaults, "; "); got != "hv1 dev phy1,phy2; hv2 dev phy1,phy2" || p.Spread != scenario.SpreadECMP ||
		p.Host("hv1").Sysctls["net.ipv4.fib_multipath_hash_policy"] != "1" {
		t.Fatalf("ECMP plan: default routes %s, spread %q, sysctls %v", got, p.Spread, p.Host("hv1").Sysctls)
	}
	if plain, _ := world.NewPlan("plan", s, s.Variant("mptcp")); plain.Spread != "" || plain.Host("hv1").Sysctls["net.ipv4.fib_multipath_hash_policy"] != "" {
		t.Fatalf("without spread: %q %v", plain.Spread, plain.Host("hv1").Sysctls)
	}

	testutil.RequireLab(t)
	w := up(t, s, "ecmp", labName(t, "tecmp"))
	vm1, vm2 := w.Tenants.VM("vm1"), w.Tenants.VM("vm2")
	sink(t, vm2.NetNS, netip.AddrPortFrom(vm2.Addr, 5300))
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- send(vm1.NetNS, vm1.Addr, netip.AddrPortFrom(vm2.Addr, 5300), 64<<10)
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// 16 flows on 2 links: all on one has probability 2^-15.
	links := stats(t, w)
	up1, up2 := links["phy1"].Up.Stats.Bytes, links["phy2"].Up.Stats.Bytes
	t.Logf("hv1→hv2: phy1 %d B, phy2 %d B", up1, up2)
	if up1 < 64<<10 || up2 < 64<<10 {
		t.Errorf("hv1→hv2: phy1 %d B, phy2 %d B; want both links used", up1, up2)
	}
}
