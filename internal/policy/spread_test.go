package policy

import (
	"net/netip"
	"strings"
	"testing"

	"mpsteer/internal/yamlcfg"
)

// spreadEnv is a hypervisor with a bridge and three uplinks.
func spreadEnv() Env {
	devs := map[string][]netip.Addr{
		"vmbr0": {netip.MustParseAddr("10.1.0.254")},
		"vm1":   nil, // a bridge port: no address, but it exists
		"phy1":  {netip.MustParseAddr("10.250.1.1")},
		"phy2":  {netip.MustParseAddr("10.250.2.1")},
		"phy3":  {netip.MustParseAddr("10.250.3.1")},
	}
	return Env{Addrs: func(d string) ([]netip.Addr, bool) { a, ok := devs[d]; return a, ok }}
}

func spreadFrom(t *testing.T, src string, env Env) (*Spread, error) {
	t.Helper()
	m, err := yamlcfg.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	var p Policy
	for _, it := range m.List("policies") {
		p = Build(it.Map, env)
	}
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return p.(*Spread), nil
}

func TestSpreadConfig(t *testing.T) {
	p, err := spreadFrom(t, `policies:
  - name: spread
    from: [vmbr0]
    via: [{dev: phy1, gateway: 10.250.1.2}, {dev: phy2, gateway: 10.250.2.2}, phy3]
    mark_base: 0x100
    table_base: 300
    priority: 90
`, spreadEnv())
	if err != nil {
		t.Fatal(err)
	}
	if len(p.From) != 1 || p.From[0] != "vmbr0" || len(p.Via) != 3 || p.Via[0].Gateway != netip.MustParseAddr("10.250.1.2") ||
		p.Via[2].Dev != "phy3" || p.Via[2].Gateway.IsValid() || p.MarkBase != 0x100 || p.TableBase != 300 || p.Priority != 90 {
		t.Fatalf("%+v", p)
	}
	if p.Where != "c.yaml:2: policies[0]" {
		t.Errorf("where %q", p.Where)
	}
	if acts := p.Decide(&Snapshot{}); len(acts) != 0 {
		t.Errorf("decide: %v; the decisions are the datapath's", acts)
	}
	st := p.Status().(SpreadStatus)
	if st.Installed || len(st.Via) != 3 || st.Via[0] != "phy1 via 10.250.1.2" {
		t.Errorf("status %+v", st)
	}
	p.SetDatapath(func() any { return "counters" })
	if st := p.Status().(SpreadStatus); !st.Installed || st.Datapath != "counters" {
		t.Errorf("status with a datapath %+v", st)
	}
	// Defaults; a config checked off the host (a lab scenario) does not
	// know its devices.
	p, err = spreadFrom(t, "policies: [{name: spread, from: [br9], via: [eth7, eth8]}]", Env{})
	if err != nil {
		t.Fatal(err)
	}
	if p.MarkBase != SpreadDefaultMarkBase || p.TableBase != SpreadDefaultTableBase || p.Priority != SpreadDefaultPriority {
		t.Errorf("defaults %+v", p)
	}
}

func TestSpreadConfigErrors(t *testing.T) {
	const via = "via: [{dev: phy1, gateway: 10.250.1.2}, {dev: phy2}]"
	cases := map[string]string{
		"{name: spread, " + via + "}":                                                      `c.yaml:1: policies[0].from: name the VM-facing devices`,
		"{name: spread, from: [], " + via + "}":                                            `c.yaml:1: policies[0].from: name at least one VM-facing device`,
		"{name: spread, from: [vmbr9], " + via + "}":                                       `c.yaml:1: policies[0].from: this host has no device vmbr9`,
		"{name: spread, from: [vmbr0]}":                                                    `c.yaml:1: policies[0].via: name the uplinks to spread over`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1}]}":                                `c.yaml:1: policies[0].via: 1 uplink given; spreading needs at least 2`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1}, {dev: phy7}]}":                   `c.yaml:1: policies[0].via[1].dev: this host has no device phy7`,
		"{name: spread, from: [vmbr0], via: [phy1, phy7]}":                                 `c.yaml:1: policies[0].via[1]: this host has no device phy7`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1}, {gateway: 1.2.3.4}]}":            `c.yaml:1: policies[0].via[1].dev: name the uplink device`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1}, {dev: phy1}]}":                   `c.yaml:1: policies[0].via[1].dev: device phy1 is named twice (also in policies[0].via[0].dev)`,
		"{name: spread, from: [phy1], " + via + "}":                                        `c.yaml:1: policies[0].via[0].dev: device phy1 is named twice (also in policies[0].from)`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: fe80::1}, {dev: phy2}]}": `c.yaml:1: policies[0].via[0].gateway: fe80::1 is not an IPv4 address`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1, gateway: router}, {dev: phy2}]}":  `c.yaml:1: policies[0].via[0].gateway: "router" is not an IP address`,
		"{name: spread, from: [vmbr0], via: [{dev: phy1, mtu: 9000}, {dev: phy2}]}":        `c.yaml:1: policies[0].via[0].mtu: unknown key "mtu"`,
		"{name: spread, from: [vmbr0], " + via + ", mark_base: 0}":                         `c.yaml:1: policies[0].mark_base: "0" is not a packet mark`,
		"{name: spread, from: [vmbr0], " + via + ", table_base: 253}":                      `c.yaml:1: policies[0].table_base: table 253 (uplink 1) is one of the kernel's own tables`,
		"{name: spread, from: [vmbr0], " + via + ", priority: 32766}":                      `c.yaml:1: policies[0].priority: "32766" is not valid`,
		"{name: spread, from: [vmbr0], " + via + ", uplinks: 2}":                           `c.yaml:1: policies[0].uplinks: unknown key "uplinks"`,
	}
	for src, want := range cases {
		_, err := spreadFrom(t, "policies: ["+src+"]", spreadEnv())
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s:\n  err = %v\n  want %q", src, err, want)
		}
	}
	// 17 uplinks.
	var many []string
	for i := 0; i < 17; i++ {
		many = append(many, "phy1")
	}
	_, err := spreadFrom(t, "policies: [{name: spread, from: [vmbr0], via: ["+strings.Join(many, ", ")+"]}]", Env{})
	if err == nil || !strings.Contains(err.Error(), "17 uplinks given; at most 16") {
		t.Errorf("17 uplinks: %v", err)
	}
}
