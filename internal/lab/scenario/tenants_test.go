package scenario

import (
	"slices"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
)

const tenantsSrc = `
tenants:
  attach: veth
  links:
    - {name: phy1, rate: 100mbit, delay: 1ms, queue: 100pkt}
    - {name: phy2, rate: 100mbit, delay: 2ms, up: {rate: 50mbit}}
  vms:
    - {name: vm1, on: hv1, cc: cubic, rmem: 8MiB}
    - {name: vm2, on: hv2}
    - {name: bg1, on: hv1}
    - {name: bg2, on: hv2}
  measure: {client: vm1, server: vm2, subflows: 2}
traffic:
  - {type: bulk, duration: 10s}
  - {type: udp-flood, pair: [bg1, bg2], from: 0s, to: 10s, rate: 20mbit}
  - {type: bulk, pair: [bg2, bg1], duration: 5s}
events:
  - {at: 5s, link: phy2, action: down}
variants:
  - mptcp
  - name: mptcp+spread
    daemon:
      hv1: {policies: [{name: spread, from: [vm1, bg1], via: [phy1, phy2]}]}
      client: {interval: 200ms}
`

func TestParseTenants(t *testing.T) {
	s, err := Load(writeScenario(t, tenantsSrc, nil))
	if err != nil {
		t.Fatal(err)
	}
	tn := s.Tenants
	if tn == nil || tn.Hypervisors != [2]string{"hv1", "hv2"} || tn.Attach != AttachVeth || tn.Client != "vm1" || tn.Server != "vm2" || tn.Subflows != 2 {
		t.Fatalf("tenants %+v", tn)
	}
	if len(tn.Links) != 2 || tn.Links[0].Up.Rate != 100*units.Mbit || tn.Links[1].Up.Rate != 50*units.Mbit || tn.Links[1].Down.Rate != 100*units.Mbit ||
		tn.Links[1].Down.Delay != 2*time.Millisecond || tn.Links[0].Up.QueuePackets != 100 {
		t.Errorf("links %+v", tn.Links)
	}
	if vm := tn.VM("vm1"); vm == nil || vm.On != "hv1" || vm.CC != "cubic" || vm.Rmem != 8<<20 {
		t.Errorf("vm1 %+v", vm)
	}
	if !slices.Equal(tn.Hosts(), []string{"hv1", "hv2", "vm1", "vm2", "bg1", "bg2"}) {
		t.Errorf("hosts %v", tn.Hosts())
	}
	tr := s.Traffic
	if !tr[0].Measured(s) || tr[1].Measured(s) || tr[2].Measured(s) || tr[1].Pair != [2]string{"bg1", "bg2"} || tr[2].Pair != [2]string{"bg2", "bg1"} {
		t.Errorf("traffic pairs %+v", tr)
	}
	if len(s.Events) != 1 || !slices.Equal(s.Events[0].Links, []string{"phy2"}) {
		t.Errorf("events %+v", s.Events)
	}
	v := s.Variant("mptcp+spread")
	if v == nil || len(v.Daemon) != 2 || v.Daemon["hv1"] == nil || v.Daemon["client"] == nil || v.Spread != "" || len(v.Paths) != 0 {
		t.Errorf("variant %+v", v)
	}
}

// Several measured pairs: traffic without a pair runs between each, and
// naming one of them is measured too.
func TestParseTenantsPairs(t *testing.T) {
	s, err := Load(writeScenario(t, `
tenants:
  links: [{name: phy1, rate: 100mbit}, {name: phy2, rate: 100mbit}]
  vms:
    - {name: vm1, on: hv1}
    - {name: vm2, on: hv2}
    - {name: vm3, on: hv1}
    - {name: vm4, on: hv2}
    - {name: bg1, on: hv1}
    - {name: bg2, on: hv2}
  measure:
    subflows: 2
    pairs:
      - {client: vm1, server: vm2}
      - {client: vm3, server: vm4}
traffic:
  - {type: bulk, duration: 5s}
  - {type: bulk, duration: 5s, pair: [vm3, vm4]}
  - {type: bulk, duration: 5s, pair: [bg1, bg2]}
variants: [mptcp]
`, nil))
	if err != nil {
		t.Fatal(err)
	}
	tn := s.Tenants
	if tn.Client != "vm1" || tn.Server != "vm2" || tn.Subflows != 2 || !slices.Equal(tn.Pairs, [][2]string{{"vm1", "vm2"}, {"vm3", "vm4"}}) {
		t.Fatalf("tenants %+v", tn)
	}
	tr := s.Traffic
	if !tr[0].Measured(s) || !slices.Equal(tr[0].Pairs(s), tn.Pairs) {
		t.Errorf("traffic without a pair: measured %v, pairs %v; want every measured pair", tr[0].Measured(s), tr[0].Pairs(s))
	}
	if !tr[1].Measured(s) || !slices.Equal(tr[1].Pairs(s), [][2]string{{"vm3", "vm4"}}) {
		t.Errorf("traffic of the second measured pair: measured %v, pairs %v", tr[1].Measured(s), tr[1].Pairs(s))
	}
	if tr[2].Measured(s) || !slices.Equal(tr[2].Pairs(s), [][2]string{{"bg1", "bg2"}}) {
		t.Errorf("background traffic: measured %v, pairs %v", tr[2].Measured(s), tr[2].Pairs(s))
	}
}

func TestTenantsErrors(t *testing.T) {
	const links = "  links: [{name: phy1, rate: 10mbit}, {name: phy2, rate: 10mbit}]\n"
	const vms = "  vms: [{name: vm1, on: hv1}, {name: vm2, on: hv2}]\n"
	const measure = "  measure: {client: vm1, server: vm2}\n"
	const ok = "tenants:\n" + links + vms + measure + "traffic:\n  - {type: bulk, duration: 5s}\n"
	cases := []struct{ name, src, want string }{
		{"paths too", "paths: [{name: a}]\n" + ok, `s.yaml:1: paths: a tenants world has no paths`},
		{"hosts too", "hosts: {client: {cc: bbr}}\n" + ok, `s.yaml:1: hosts: a tenants world has no hosts`},
		{"three hypervisors", "tenants:\n  hypervisors: [a, b, c]\n" + links + "  vms: [{name: vm1, on: a}, {name: vm2, on: b}]\n" + measure,
			`s.yaml:2: tenants.hypervisors: 3 hypervisors given; a tenants world has exactly two`},
		{"hypervisor with a dash", "tenants:\n  hypervisors: [hv-1, hv2]\n" + links + "  vms: [{name: vm1, on: hv2}, {name: vm2, on: hv2}]\n" + measure,
			`s.yaml:2: tenants.hypervisors: "hv-1" is not a valid host name`},
		{"no links", "tenants:\n" + vms + measure, `s.yaml:2: tenants.links: a tenants world needs physical links`},
		{"link twice", "tenants:\n  links: [{name: phy1}, {name: phy1}]\n" + vms + measure, `s.yaml:2: tenants.links[1].name: link name "phy1" is used twice`},
		{"link bad key", "tenants:\n  links: [{name: phy1, speed: 1}]\n" + vms + measure, `s.yaml:2: tenants.links[0].speed: unknown key "speed"`},
		{"one VM", "tenants:\n" + links + "  vms: [{name: vm1, on: hv1}]\n  measure: {client: vm1, server: vm1}\n",
			`s.yaml:3: tenants.vms: a tenants world needs at least two VMs`},
		{"VM on no hypervisor", "tenants:\n" + links + "  vms: [{name: vm1, on: hv3}, {name: vm2, on: hv2}]\n" + measure,
			`s.yaml:3: tenants.vms[0].on: "hv3" is not a hypervisor (valid: hv1, hv2)`},
		{"VM named like a hypervisor", "tenants:\n" + links + "  vms: [{name: hv1, on: hv1}, {name: vm2, on: hv2}]\n  measure: {client: vm2, server: vm2}\n",
			`s.yaml:3: tenants.vms[0].name: "hv1" is a hypervisor already`},
		{"VM named like a link", "tenants:\n" + links + "  vms: [{name: phy1, on: hv1}, {name: vm2, on: hv2}]\n  measure: {client: vm2, server: phy1}\n",
			`s.yaml:3: tenants.vms[0].name: "phy1" is the name of a link`},
		{"no measure", "tenants:\n" + links + vms, `s.yaml:2: tenants.measure: name the measured VM pair`},
		{"measure unknown VM", "tenants:\n" + links + vms + "  measure: {client: vm1, server: vm9}\n", `s.yaml:4: tenants.measure.server: "vm9" is not a VM (VMs: vm1, vm2)`},
		{"measure one VM", "tenants:\n" + links + vms + "  measure: {client: vm1, server: vm1}\n", `s.yaml:4: tenants.measure.server: the measured pair needs two VMs`},
		{"too many subflows", "tenants:\n" + links + vms + "  measure: {client: vm1, server: vm2, subflows: 9}\n", `s.yaml:4: tenants.measure.subflows: "9" is not valid`},
		{"pairs and client", "tenants:\n" + links + vms + "  measure: {client: vm1, pairs: [{client: vm1, server: vm2}]}\n", `s.yaml:4: tenants.measure.pairs: give either client and server (one measured pair) or pairs (several), not both`},
		{"pairs empty", "tenants:\n" + links + vms + "  measure: {pairs: []}\n", `s.yaml:4: tenants.measure.pairs: pairs is a list of measured VM pairs`},
		{"pair a list", "tenants:\n" + links + vms + "  measure: {pairs: [vm1, vm2]}\n", `s.yaml:4: tenants.measure.pairs[0]: a measured pair is a mapping {client: VM, server: VM}`},
		{"pairs unknown VM", "tenants:\n" + links + vms + "  measure: {pairs: [{client: vm1, server: vm3}]}\n", `s.yaml:4: tenants.measure.pairs[0].server: "vm3" is not a VM (VMs: vm1, vm2)`},
		{"pairs share a VM", "tenants:\n" + links + "  vms: [{name: vm1, on: hv1}, {name: vm2, on: hv2}, {name: vm3, on: hv1}]\n  measure: {pairs: [{client: vm1, server: vm2}, {client: vm3, server: vm2}]}\n",
			`s.yaml:4: tenants.measure.pairs[1].server: vm2 is in pair 1 already; each measured VM is in one pair`},
		{"pairs bad key", "tenants:\n" + links + vms + "  measure: {pairs: [{client: vm1, server: vm2, via: phy1}]}\n", `s.yaml:4: tenants.measure.pairs[0].via: unknown key "via"`},
		{"attach unknown", "tenants:\n  attach: macvlan\n" + links + vms + measure, `s.yaml:2: tenants.attach: "macvlan" is not valid (valid: bridge, veth)`},
		{"flood on a path", ok + "  - {type: udp-flood, path: a, from: 0s, to: 1s, rate: 1mbit}\n", `s.yaml:7: traffic[1].path: a tenants world has no paths`},
		{"pair of one", ok + "  - {type: bulk, duration: 1s, pair: [vm1]}\n", `s.yaml:7: traffic[1].pair: a pair is two VMs`},
		{"pair unknown", ok + "  - {type: bulk, duration: 1s, pair: [vm1, vm7]}\n", `s.yaml:7: traffic[1].pair: "vm7" is not a VM (VMs: vm1, vm2)`},
		{"pair without tenants", "paths: [{name: a}]\ntraffic: [{type: bulk, duration: 1s, pair: [a, b]}]\n", `s.yaml:2: traffic[0].pair: pair names two VMs of a tenants world`},
		{"event on a path", ok + "events: [{at: 1s, path: a, action: down}]\n", `s.yaml:7: events[0].path: a tenants world has no paths; name its links instead (link: phy1, phy2)`},
		{"event on an unknown link", ok + "events: [{at: 1s, link: phy3, action: down}]\n", `s.yaml:7: events[0].link: "phy3" is not a core link (core links: phy1, phy2)`},
		{"variant spread key", ok + "variants: [{name: x, spread: pinned}]\n", `s.yaml:7: variants[0].spread: spread says how a core's routers spread flows; in a tenants world`},
		{"variant paths", ok + "variants: [{name: x, paths: [a]}]\n", `s.yaml:7: variants[0].paths: a tenants world has no paths`},
		{"daemon on an unknown host", ok + "variants:\n  - name: x\n    daemon: {hv9: {}}\n", `s.yaml:9: variants[0].daemon.hv9: unknown key "hv9" (valid here: client, hv1, hv2, server, vm1, vm2)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := writeScenario(t, c.src, nil)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if !strings.Contains(lines[0], c.want) {
				t.Fatalf("errors:\n%v\nwant the first to contain %q", err, c.want)
			}
			if !strings.HasPrefix(lines[0], f+":") {
				t.Fatalf("error does not start with the file name: %v", err)
			}
		})
	}
}
