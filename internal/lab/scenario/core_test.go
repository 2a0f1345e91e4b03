package scenario

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/units"
)

const perPair = `
core:
  links_per_pair: 2
  rate: 10mbit
  delay: 2ms
  queue: 50pkt
  overrides: [{link: c1x2-1, rate: 5mbit}]
paths:
  - {name: a, via: core}
  - {name: b, via: core, rate: 100mbit}
  - {name: direct, rate: 10mbit}
traffic: [{type: bulk, duration: 10s}]
events:
  - {at: 2s, link: c1x1-0, action: down}
  - {at: 3s, link: [c1x1-0, c2x2-1], action: up, dir: up}
  - {at: 4s, link: c2x1-0, set: {delay: 20ms}}
variants:
  - mptcp
  - {name: pinned, spread: pinned, events: [{at: 5s, link: c1x2-0, action: down}]}
  - {name: ecmp, spread: ecmp, path_manager: userspace}
  - {name: split, path_manager: {client: userspace, server: kernel}}
  - {name: sspi, mptcpd: sspi}
  - {name: sspi2, mptcpd: sspi, path_manager: {client: userspace}}
  - tcp
`

// withPlugins points mptcpd's plugin directory at a temporary one holding
// the named plugins.
func withPlugins(t *testing.T, names ...string) {
	t.Helper()
	dir := t.TempDir()
	for _, n := range names {
		os.WriteFile(filepath.Join(dir, n+".so"), nil, 0o644)
	}
	old := MptcpdPluginDirs
	MptcpdPluginDirs = []string{dir}
	t.Cleanup(func() { MptcpdPluginDirs = old })
}

func TestParsePerPairCore(t *testing.T) {
	withPlugins(t, "addr_adv", "sspi")
	s, err := Load(writeScenario(t, perPair, nil))
	if err != nil {
		t.Fatal(err)
	}
	c := s.Core
	want := []string{"c1x1-0", "c1x1-1", "c1x2-0", "c1x2-1", "c2x1-0", "c2x1-1", "c2x2-0", "c2x2-1"}
	if c.LinksPerPair != 2 || !slices.Equal(c.LinkNames(), want) {
		t.Fatalf("core: %d per pair, links %v; want 2 per pair, %v", c.LinksPerPair, c.LinkNames(), want)
	}
	l := c.Link("c1x2-1")
	if l.Client != "a" || l.Server != "b" || l.K != 1 || l.Up.Rate != 5*units.Mbit || l.Down.Rate != 5*units.Mbit || l.Up.Delay != 2*time.Millisecond || l.Up.QueuePackets != 50 {
		t.Errorf("c1x2-1 %+v", l)
	}
	if l := c.Link("c2x1-0"); l.Client != "b" || l.Server != "a" || l.Up.Rate != 10*units.Mbit {
		t.Errorf("c2x1-0 %+v", l)
	}
	if a, b, d := s.Path("a"), s.Path("b"), s.Path("direct"); !a.Plain || b.Plain || d.Plain {
		t.Errorf("plain: a %v, b %v, direct %v; want only a", a.Plain, b.Plain, d.Plain)
	}
	ev := s.Events
	if len(ev) != 3 || ev[0].Path != "" || !slices.Equal(ev[0].Links, []string{"c1x1-0"}) || ev[0].Action != ActDown ||
		!slices.Equal(ev[1].Links, []string{"c1x1-0", "c2x2-1"}) || ev[1].Dir != DirUp || ev[2].Action != ActSet || *ev[2].Patch.Delay != 20*time.Millisecond {
		t.Errorf("events %+v", ev)
	}
	type pmw struct {
		spread                 Spread
		client, server, mptcpd string
	}
	for name, w := range map[string]pmw{
		"mptcp":  {SpreadECMP, PMKernel, PMKernel, ""},
		"pinned": {SpreadPinned, PMKernel, PMKernel, ""},
		"ecmp":   {SpreadECMP, PMUserspace, PMUserspace, ""},
		"split":  {SpreadECMP, PMUserspace, PMKernel, ""},
		"sspi":   {SpreadECMP, PMUserspace, PMKernel, "sspi"},
		"sspi2":  {SpreadECMP, PMUserspace, PMKernel, "sspi"},
		"tcp":    {SpreadECMP, PMKernel, PMKernel, ""},
	} {
		v := s.Variant(name)
		if v.Spread != w.spread || v.PathManager["client"] != w.client || v.PathManager["server"] != w.server || v.Mptcpd != w.mptcpd {
			t.Errorf("variant %s: spread %s, path managers %v, mptcpd %q; want %+v", name, v.Spread, v.PathManager, v.Mptcpd, w)
		}
	}
	if v := s.Variant("pinned"); len(v.Events) != 1 || v.Events[0].Links[0] != "c1x2-0" {
		t.Errorf("pinned events %+v", v.Events)
	}

	// A core of shared links keeps its names.
	s, err = Load(writeScenario(t, "core: {links: 3}\npaths: [{name: a, via: core}]\nevents: [{at: 1s, link: core2, action: down}]", nil))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(s.Core.LinkNames(), []string{"core0", "core1", "core2"}) || s.Variant("mptcp").Spread != SpreadECMP || !s.Path("a").Plain {
		t.Errorf("shared core %v, spread %s", s.Core.LinkNames(), s.Variant("mptcp").Spread)
	}
	// Without a core there is no spread.
	s, err = Load(writeScenario(t, "paths: [{name: a}]", nil))
	if err != nil {
		t.Fatal(err)
	}
	if v := s.Variant("mptcp"); v.Spread != "" || v.PathManager["client"] != PMKernel {
		t.Errorf("no core: %+v", v)
	}
}

func TestPerPairErrors(t *testing.T) {
	withPlugins(t, "addr_adv", "sspi")
	const two = "paths: [{name: a, via: core}, {name: b, via: core}]\n"
	const pp = "core: {links_per_pair: 2}\n" + two
	const shared = "core: {links: 2}\n" + two
	manyVia := "core: {links_per_pair: 4}\npaths: ["
	for i := 0; i < 9; i++ {
		manyVia += "{name: p" + string(rune('a'+i)) + ", via: core},"
	}
	manyVia += "]"
	cases := []struct {
		name, src, want string
	}{
		{"links and links_per_pair", "core: {links: 2, links_per_pair: 2}\n" + two,
			`s.yaml:1: core.links_per_pair: give either links (M links shared by every via-core path) or links_per_pair (M links for every client/server address pair), not both`},
		{"neither", "core: {rate: 10mbit}\n" + two, `s.yaml:1: core.links: a core needs links (the number of parallel links shared by every via-core path, 1 to 16) or links_per_pair`},
		{"links_per_pair out of range", "core: {links_per_pair: 17}\n" + two, `s.yaml:1: core.links_per_pair: "17" is not valid (a whole number from 1 to 16)`},
		{"links_per_pair not a number", "core: {links_per_pair: many}\n" + two, `s.yaml:1: core.links_per_pair: "many" is not valid`},
		{"too many core links", manyVia, `s.yaml:1: core.links_per_pair: 4 links for each of 81 (client, server) address pairs (9 via-core paths) make 324 core links; the core's addressing (a /24 of 10.200.0.0/16 per link) allows at most 256`},
		{"no via-core path", "core: {links_per_pair: 2}\npaths: [{name: a}]", `s.yaml:1: core.links_per_pair: no path is via core`},
		{"override by unknown name", "core:\n  links_per_pair: 1\n  overrides: [{link: c3x1-0, rate: 1mbit}]\n" + two,
			`s.yaml:3: core.overrides[0].link: "c3x1-0" is not a core link (core links: c1x1-0, c1x2-0, c2x1-0, c2x2-0)`},
		{"override by number with links_per_pair", "core:\n  links_per_pair: 1\n  overrides: [{link: 0, rate: 1mbit}]\n" + two,
			`s.yaml:3: core.overrides[0].link: "0" is not a core link`},
		{"event on unknown link", pp + "events: [{at: 1s, link: c1x1-2, action: down}]",
			`s.yaml:3: events[0].link: "c1x1-2" is not a core link (core links: c1x1-0, c1x1-1, c1x2-0, c1x2-1, c2x1-0, c2x1-1, c2x2-0, c2x2-1)`},
		{"event on unknown link in a list", pp + "events:\n  - {at: 1s, link: [c1x1-0, core0], action: down}",
			`s.yaml:4: events[0].link: "core0" is not a core link (core links: c1x1-0`},
		{"event on a link twice", pp + "events: [{at: 1s, link: [c1x1-0, c1x1-0], action: down}]", `s.yaml:3: events[0].link: core link "c1x1-0" is named twice`},
		{"event on path and link", pp + "events: [{at: 1s, path: a, link: c1x1-0, action: down}]", `s.yaml:3: events[0].link: give either path (a path) or link (core links), not both`},
		{"event on neither", pp + "events: [{at: 1s, action: down}]", `s.yaml:3: events[0].path: every event needs the path it changes (path: NAME) or the core links it changes (link: NAME or a list)`},
		{"event on a link without core", "paths: [{name: a}]\nevents: [{at: 1s, link: core0, action: down}]", `s.yaml:2: events[0].link: the scenario has no core`},
		{"event link list empty", pp + "events: [{at: 1s, link: [], action: down}]", `s.yaml:3: events[0].link: name at least one core link`},
		{"remove a link", pp + "events: [{at: 1s, link: c1x1-0, action: remove}]", `s.yaml:3: events[0].action: remove takes a path away`},
		{"ifdown a link", pp + "events: [{at: 1s, link: c1x1-0, action: ifdown}]", `s.yaml:3: events[0].action: ifdown acts on the client's interface of a path; core links have none`},
		{"unknown action", "paths: [{name: a}]\nevents: [{at: 1s, path: a, action: unplug}]", `s.yaml:2: events[0].action: "unplug" is not valid (valid: set, down, up, remove, ifdown, ifup)`},
		{"event on a plain path", pp + "events: [{at: 1s, path: a, action: down}]", `s.yaml:3: events[0].path: path "a" is via core without link parameters, so its access link is a plain veth`},
		{"variant event on unknown link", pp + "variants:\n  - {name: x, events: [{at: 1s, link: c1x1-5, action: up}]}", `s.yaml:4: variants[0].events[0].link: "c1x1-5" is not a core link`},
		{"shared core link names", shared + "events: [{at: 1s, link: c1x1-0, action: down}]", `s.yaml:3: events[0].link: "c1x1-0" is not a core link (core links: core0, core1)`},
		{"spread without core", "paths: [{name: a}]\nvariants: [{name: x, spread: ecmp}]", `s.yaml:2: variants[0].spread: spread says how the core's routers spread flows over its links, but the scenario has no core`},
		{"spread pinned on shared links", shared + "variants: [{name: x, spread: pinned}]", `s.yaml:3: variants[0].spread: pinned needs a core with links per address pair`},
		{"spread unknown", pp + "variants: [{name: x, spread: random}]", `s.yaml:3: variants[0].spread: "random" is not valid (valid: ecmp, pinned)`},
		{"path_manager unknown", pp + "variants: [{name: x, path_manager: netlink}]", `s.yaml:3: variants[0].path_manager: "netlink" is not valid (valid: kernel, userspace)`},
		{"path_manager host value unknown", pp + "variants:\n  - name: x\n    path_manager: {client: mptcpd}", `s.yaml:5: variants[0].path_manager.client: "mptcpd" is not valid (valid: kernel, userspace)`},
		{"path_manager unknown host", pp + "variants:\n  - name: x\n    path_manager: {router: kernel}", `s.yaml:5: variants[0].path_manager.router: unknown key "router" (valid here: client, server)`},
		{"path_manager empty", pp + "variants: [{name: x, path_manager: {}}]", `s.yaml:3: variants[0].path_manager: name a path manager for client, server or both`},
		{"path_manager list", pp + "variants: [{name: x, path_manager: [kernel]}]", `s.yaml:3: variants[0].path_manager: must be a single value, not a list`},
		{"path_manager on tcp", pp + "variants: [{name: x, kind: tcp, path_manager: userspace}]", `s.yaml:3: variants[0].path_manager: a tcp variant does not use MPTCP`},
		{"mptcpd bad name", pp + "variants: [{name: x, mptcpd: Sspi.so}]", `s.yaml:3: variants[0].mptcpd: "Sspi.so" is not a plugin name`},
		{"mptcpd empty", pp + "variants: [{name: x, mptcpd: ''}]", `s.yaml:3: variants[0].mptcpd: name the mptcpd plugin to load`},
		{"mptcpd unknown plugin", pp + "variants: [{name: x, mptcpd: fullmesh}]", `s.yaml:3: variants[0].mptcpd: mptcpd has no plugin "fullmesh" in `},
		{"mptcpd on tcp", pp + "variants: [{name: x, kind: tcp, mptcpd: sspi}]", `s.yaml:3: variants[0].mptcpd: a tcp variant does not use MPTCP; mptcpd needs kind: mptcp`},
		{"mptcpd with a kernel client", pp + "variants:\n  - {name: x, mptcpd: sspi, path_manager: {client: kernel}}",
			`s.yaml:4: variants[0].mptcpd: mptcpd is a userspace path manager, but the client's path_manager is kernel`},
		{"mptcpd with kernel for both", pp + "variants:\n  - {name: x, mptcpd: sspi, path_manager: kernel}", `variants[0].mptcpd: mptcpd is a userspace path manager`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := writeScenario(t, c.src, nil)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != 1 || !strings.Contains(lines[0], c.want) {
				t.Fatalf("errors:\n%v\nwant exactly one, containing %q", err, c.want)
			}
			if !strings.HasPrefix(lines[0], f+":") {
				t.Fatalf("error does not start with the file name: %v", err)
			}
		})
	}
}
