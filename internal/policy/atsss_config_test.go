package policy

import (
	"net/netip"
	"strings"
	"testing"

	"mpsteer/internal/yamlcfg"
)

// parseATSSS reads an atsss section given as the document's atsss key.
func parseATSSS(t *testing.T, src string, env Env) (*ATSSS, error) {
	t.Helper()
	m, err := yamlcfg.Parse("c.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	p := BuildATSSS(m.Map("atsss"), env)
	m.Done()
	return p, m.Err()
}

const atsssHead = `atsss:
  accesses: {wifi: 10.1.0.1, cell: 10.2.0.1}
`

func TestATSSSCompilesRulesInOrder(t *testing.T) {
	src := atsssHead + `  rules:
    - name: voice
      match: {to: [198.51.100.0/24], ports: [5060, 10000-20000]}
      mode: smallest-delay
      margin: 25%
      thresholds: {rtt: 150ms, loss: 2%}
    - name: voice-rest
      match: {ports: [5060]}
      mode: active-standby
      active: cell
    - name: video
      match: {cgroup: /system.slice/video.service}
      mode: load-balancing
      split: {wifi: 70%, cell: 30%}
    - name: bulk
      match: {to: [2001:db8::/32]}
      mode: priority-based
      priority: [wifi, cell]
  default: {mode: load-balancing, split: autonomous}
`
	p, err := parseATSSS(t, src, Env{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range p.rules {
		got = append(got, r.Name+" "+r.Mode+" "+r.params(p.accesses))
	}
	want := []string{
		"voice smallest-delay margin 25% (at least 2ms), rtt over 500ms, probes every 1s; thresholds rtt 150ms, loss 2% (hysteresis 20%)",
		"voice-rest active-standby active cell, standby wifi",
		"video load-balancing split wifi 70% / cell 30%",
		"bulk priority-based priority wifi > cell",
		"default load-balancing split autonomous (MPTCP's own aggregation)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("rules:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	if cg := p.Cgroups(); len(cg) != 1 || cg[0] != "/system.slice/video.service" {
		t.Errorf("cgroups %v", cg)
	}
	// First match wins, by the connection's server end.
	conn := func(remote string, serverSide bool, cgroup string) *Conn {
		c := &Conn{Token: 1, Cgroup: cgroup, ServerSide: serverSide}
		c.Local, c.Remote = netip.MustParseAddrPort("10.1.0.1:40000"), netip.MustParseAddrPort(remote)
		if serverSide {
			c.Local, c.Remote = netip.MustParseAddrPort(remote), netip.MustParseAddrPort("10.1.0.9:40000")
		}
		return c
	}
	for _, tc := range []struct {
		c    *Conn
		rule string
	}{
		{conn("198.51.100.7:5060", false, ""), "voice"},
		{conn("198.51.100.7:15000", false, ""), "voice"},
		{conn("198.51.100.7:5060", true, ""), "voice"}, // this host is the server: its own end
		{conn("203.0.113.1:5060", false, ""), "voice-rest"},
		{conn("203.0.113.1:443", false, "/system.slice/video.service/worker"), "video"},
		{conn("[2001:db8::1]:443", false, ""), "bulk"},
		{conn("[2001:db9::1]:443", false, "/system.slice/other.service"), "default"},
	} {
		i := p.match(tc.c)
		if i < 0 || p.rules[i].Name != tc.rule {
			t.Errorf("%v (server side %v, cgroup %q): rule %d, want %s", tc.c.Remote, tc.c.ServerSide, tc.c.Cgroup, i, tc.rule)
		}
	}
	if i := p.match(&Conn{Token: 2}); i != -1 {
		t.Errorf("a connection whose addresses are unknown matched rule %d", i)
	}
}

// Every mistake is refused with the file, the line and the key.
func TestATSSSBadInputIsRefused(t *testing.T) {
	rules := func(s string) string { return atsssHead + "  rules:\n" + s }
	for _, tc := range []struct{ name, src, want string }{
		{"unknown access in split", rules("    - {name: a, match: {ports: [443]}, mode: load-balancing, split: {wifi: 70%, lte: 30%}}\n"),
			`c.yaml:4: atsss.rules[0].split: unknown access "lte" (the accesses: wifi, cell)`},
		{"unknown active", rules("    - {name: a, match: {ports: [443]}, mode: active-standby, active: wlan}\n"),
			`c.yaml:4: atsss.rules[0].active: unknown access "wlan" (the accesses: wifi, cell)`},
		{"unknown priority", rules("    - {name: a, match: {ports: [443]}, mode: priority-based, priority: [wifi, lte]}\n"),
			`c.yaml:4: atsss.rules[0].priority: unknown access "lte"`},
		{"split not 100%", rules("    - name: a\n      match: {ports: [443]}\n      mode: load-balancing\n      split: {wifi: 60%, cell: 30%}\n"),
			`c.yaml:7: atsss.rules[0].split: the shares add up to 90%, not 100%: wifi 60% + cell 30%`},
		{"missing active", rules("    - name: a\n      match: {ports: [443]}\n      mode: active-standby\n"),
			`c.yaml:6: atsss.rules[0].mode: active-standby needs active: ACCESS`},
		{"missing split", "atsss:\n  accesses: {wifi: 10.1.0.1, cell: 10.2.0.1}\n  default:\n    mode: load-balancing\n",
			`c.yaml:4: atsss.default.mode: load-balancing needs split:`},
		{"missing priority", rules("    - {name: a, match: {ports: [443]}, mode: priority-based}\n"),
			`c.yaml:4: atsss.rules[0].mode: priority-based needs priority:`},
		{"redundant", rules("    - {name: a, match: {ports: [443]}, mode: redundant}\n"),
			`c.yaml:4: atsss.rules[0].mode: mode redundant is refused: upstream Linux's MPTCP scheduler sends each byte on one subflow`},
		{"unknown mode", rules("    - {name: a, match: {ports: [443]}, mode: fastest}\n"),
			`c.yaml:4: atsss.rules[0].mode: "fastest" is not valid (valid: active-standby, smallest-delay, load-balancing, priority-based, redundant)`},
		{"a key of another mode", rules("    - {name: a, match: {ports: [443]}, mode: active-standby, active: wifi, split: {wifi: 50%, cell: 50%}}\n"),
			`c.yaml:4: atsss.rules[0].split: unknown key "split" with mode: active-standby: it is a key of atsss mode: load-balancing`},
		{"unknown key", rules("    - {name: a, match: {ports: [443]}, mode: active-standby, active: wifi, color: red}\n"),
			`c.yaml:4: atsss.rules[0].color: unknown key "color"`},
		{"empty match", rules("    - {name: a, match: {}, mode: active-standby, active: wifi}\n"),
			`c.yaml:4: atsss.rules[0].match: an empty match matches every connection: that is the default rule`},
		{"no match", rules("    - {name: a, mode: active-standby, active: wifi}\n"),
			`c.yaml:4: atsss.rules[0].match: a rule needs a traffic descriptor`},
		{"bad prefix", rules("    - {name: a, match: {to: [10.0.0.1/8]}, mode: active-standby, active: wifi}\n"),
			`c.yaml:4: atsss.rules[0].match.to: "10.0.0.1/8" has bits set beyond its length: write 10.0.0.0/8`},
		{"bad port", rules("    - {name: a, match: {ports: [70000]}, mode: active-standby, active: wifi}\n"),
			`c.yaml:4: atsss.rules[0].match.ports: "70000" is not a port or a range of ports`},
		{"unreachable", rules("    - {name: web, match: {ports: [400-500]}, mode: active-standby, active: wifi}\n    - {name: tls, match: {to: [10.0.0.0/8], ports: [443]}, mode: active-standby, active: cell}\n"),
			`c.yaml:5: atsss.rules[1].match: rule tls can never match: rule web (c.yaml:4) matches every connection it does (port 400-500)`},
		{"unreachable by two", rules("    - {name: low, match: {ports: [1-1000]}, mode: active-standby, active: wifi}\n    - {name: high, match: {ports: [1001-65535]}, mode: active-standby, active: wifi}\n    - {name: all, match: {to: [0.0.0.0/0, \"::/0\"]}, mode: active-standby, active: cell}\n"),
			`c.yaml:6: atsss.rules[2].match: rule all can never match: rules low, high together match every connection it does`},
		{"overlap in part", rules("    - {name: a, match: {ports: [400-500]}, mode: active-standby, active: wifi}\n    - {name: b, match: {ports: [450-600]}, mode: active-standby, active: cell}\n"),
			`c.yaml:5: atsss.rules[1].match: rule b overlaps rule a (c.yaml:4) in part: connections to any address, ports 450-500 match both, and both select by ports`},
		{"overlap in a list", rules("    - {name: a, match: {to: [10.0.0.0/8, 10.1.0.0/16]}, mode: active-standby, active: wifi}\n"),
			`c.yaml:4: atsss.rules[0].match.to: 10.0.0.0/8 and 10.1.0.0/16 overlap`},
		{"default unreachable", rules("    - {name: all, match: {to: [0.0.0.0/0, \"::/0\"]}, mode: active-standby, active: wifi}\n") + "  default: {mode: active-standby, active: cell}\n",
			`c.yaml:5: atsss.default: the default can never match: the rules together match every connection`},
		{"thresholds need a value", rules("    - {name: a, match: {ports: [443]}, mode: active-standby, active: wifi, thresholds: {hysteresis: 10%}}\n"),
			`c.yaml:4: atsss.rules[0].thresholds: thresholds need rtt, loss or both`},
		{"rule named twice", rules("    - {name: a, match: {ports: [443]}, mode: active-standby, active: wifi}\n    - {name: a, match: {ports: [80]}, mode: active-standby, active: wifi}\n"),
			`c.yaml:5: atsss.rules[1].name: rule a is named twice (first at c.yaml:4)`},
		{"one access", "atsss:\n  accesses: {wifi: 10.1.0.1}\n  default: {mode: active-standby, active: wifi}\n",
			`c.yaml:2: atsss.accesses: at least two accesses are needed`},
		{"access in two", "atsss:\n  accesses: {wifi: 10.1.0.1, cell: 10.1.0.1}\n  default: {mode: active-standby, active: wifi}\n",
			`c.yaml:2: atsss.accesses.cell: 10.1.0.1 is in access wifi already`},
		{"unknown interface", "atsss:\n  accesses: {wifi: wlan7, cell: 10.2.0.1}\n  default: {mode: active-standby, active: wifi}\n",
			`c.yaml:2: atsss.accesses.wifi: "wlan7" is not an interface of this host (interfaces with an address: eth0)`},
		{"nothing to steer", atsssHead, `c.yaml:2: atsss.rules: the section steers nothing`},
	} {
		env := Env{}
		if tc.name == "unknown interface" {
			env.Interfaces = func() map[string][]netip.Addr {
				return map[string][]netip.Addr{"eth0": {netip.MustParseAddr("10.9.0.1")}}
			}
			env.Addrs = func(string) ([]netip.Addr, bool) { return nil, false }
		}
		_, err := parseATSSS(t, tc.src, env)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err = %v\nwant it to contain %q", tc.name, err, tc.want)
		}
	}
}

// The narrower rule first, then the wider, and rules that select by
// other fields: first match wins, accepted.
func TestATSSSNarrowerFirstIsAccepted(t *testing.T) {
	src := atsssHead + `  rules:
    - {name: tls-lab, match: {to: [10.0.0.0/8], ports: [443]}, mode: load-balancing, split: {wifi: 50%, cell: 50%}}
    - {name: tls, match: {ports: [443]}, mode: active-standby, active: wifi}
    - {name: lab, match: {to: [10.0.0.0/8]}, mode: active-standby, active: cell}
    - {name: video, match: {cgroup: /system.slice/video.service}, mode: load-balancing, split: autonomous}
  default: {mode: active-standby, active: cell}
`
	if _, err := parseATSSS(t, src, Env{}); err != nil {
		t.Fatal(err)
	}
}

func TestDescriptorAlgebra(t *testing.T) {
	d := func(to []string, ports []string, cg string) TrafficDescriptor {
		var out TrafficDescriptor
		for _, s := range to {
			p, err := ParseDestination(s)
			if err != nil {
				t.Fatal(err)
			}
			out.To = append(out.To, p)
		}
		for _, s := range ports {
			r, err := ParsePortRange(s)
			if err != nil {
				t.Fatal(err)
			}
			out.Ports = append(out.Ports, r)
		}
		out.Cgroup = cg
		return out
	}
	all := TrafficDescriptor{}
	v4 := d([]string{"0.0.0.0/0"}, nil, "")
	v6 := d([]string{"::/0"}, nil, "")
	if !v4.Within(all) || all.Within(v4) || !v4.Within(v6) {
		t.Error("an IPv4 prefix lies in ::/0 (as IPv4-mapped addresses), and neither covers everything alone")
	}
	if c, ok := all.CoveredBy([]TrafficDescriptor{v6}); !ok || !c {
		t.Error("::/0 covers every address")
	}
	if c, _ := all.CoveredBy([]TrafficDescriptor{v4}); c {
		t.Error("0.0.0.0/0 does not cover IPv6")
	}
	a := d([]string{"10.0.0.0/8"}, []string{"443"}, "/app.slice")
	if !a.Within(d([]string{"10.0.0.0/8"}, nil, "")) || a.Within(d(nil, []string{"443"}, "/app.slice/x")) {
		t.Error("cgroup containment")
	}
	if ov := a.Overlap(d([]string{"10.1.0.0/16"}, []string{"1-1000"}, "/app.slice/x")); ov != "10.1.0.0–10.1.255.255, port 443, cgroup /app.slice/x" {
		t.Errorf("overlap %q", ov)
	}
	if ov := a.Overlap(d(nil, nil, "/other.slice")); ov != "" {
		t.Errorf("disjoint cgroups overlap: %q", ov)
	}
	// A cgroup below the rule's does not cover the rule's own cgroup.
	if c, _ := d(nil, []string{"443"}, "/a").CoveredBy([]TrafficDescriptor{d(nil, []string{"443"}, "/a/b")}); c {
		t.Error("a narrower cgroup covered a wider one")
	}
	host := d([]string{"203.0.113.7", "2001:db8::1"}, nil, "")
	if len(host.To) != 2 || host.To[0].Bits() != 32 || host.To[1].Bits() != 128 {
		t.Errorf("addresses as prefixes: %v", host.To)
	}
}
