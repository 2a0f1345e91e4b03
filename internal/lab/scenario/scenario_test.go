package scenario

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/units"
)

const full = `
name: everything
description: every key at least once
seed: 7
hosts:
  client: {cc: cubic, rmem: 8MiB, wmem: 4MiB}
  server: {cc: bbr}
core:
  links: 4
  rate: 100mbit
  delay: 5ms
  overrides:
    - {link: 2, rate: 10mbit}
paths:
  - name: wifi
    rate: 10mbit
    delay: 10ms
    jitter: 1ms
    loss: 0.5%
    queue: 64KiB
    up: {rate: 5mbit}
    outage: {at: 5s, for: 2s, every: 10s}
  - name: cell
    trace: cell.trace
    delay: 40ms
    queue: 100pkt
    backup: true
  - {name: core-a, via: core}
traffic:
  - {type: bulk, duration: 10s, size: 1GB, direction: down}
  - {type: flows, sizes: [10KiB, 1MiB], weights: [3, 1], count: 20, interval: 50ms, start: 1s}
  - {type: udp-flood, path: wifi, from: 3s, to: 6s, rate: 20mbit}
events:
  - {at: 2s, path: cell, action: down}
  - {at: 3s, path: cell, action: up}
  - {at: 4s, path: wifi, set: {delay: 50ms}, dir: up}
variants:
  - tcp
  - mptcp
  - {name: mptcp-no-wifi, paths: [cell, core-a], events: [{at: 1s, path: cell, action: remove}]}
  - {name: tcp-cell, kind: tcp, path: cell}
`

func writeScenario(t *testing.T, src string, extra map[string]string) string {
	t.Helper()
	dir := t.TempDir()
	for name, body := range extra {
		os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644)
	}
	f := filepath.Join(dir, "s.yaml")
	os.WriteFile(f, []byte(src), 0o644)
	return f
}

func TestParseEverything(t *testing.T) {
	f := writeScenario(t, full, map[string]string{"cell.trace": "1\n2\n3\n10\n"})
	s, err := Load(f)
	if err != nil {
		t.Fatal(err)
	}
	if s.Name != "everything" || s.Seed != 7 || s.Client.CC != "cubic" || s.Client.Rmem != 8<<20 || s.Server.CC != "bbr" {
		t.Fatalf("header: %+v %+v %+v", s, s.Client, s.Server)
	}
	wifi := s.Path("wifi")
	if wifi.Up.Rate != 5*units.Mbit || wifi.Down.Rate != 10*units.Mbit {
		t.Errorf("wifi rates up %v down %v, want 5mbit/10mbit", wifi.Up.Rate, wifi.Down.Rate)
	}
	if wifi.Up.Delay != 10*time.Millisecond || wifi.Up.Jitter != time.Millisecond || wifi.Up.Loss != 0.005 || wifi.Up.QueueBytes != 64<<10 {
		t.Errorf("wifi up %+v", wifi.Up)
	}
	if want := (linkemu.Outage{At: 5 * time.Second, For: 2 * time.Second, Every: 10 * time.Second}); len(wifi.Down.Outages) != 1 || wifi.Down.Outages[0] != want {
		t.Errorf("wifi outages %+v", wifi.Down.Outages)
	}
	cell := s.Path("cell")
	if cell.Up.Trace == nil || cell.Up.Trace.Period != 10*time.Millisecond || cell.Up.QueuePackets != 100 || !cell.Backup {
		t.Errorf("cell %+v", cell)
	}
	if !s.Path("core-a").ViaCore || len(s.Core.Links) != 4 || s.Core.Links[2].Up.Rate != 10*units.Mbit || s.Core.Links[1].Up.Rate != 100*units.Mbit {
		t.Errorf("core %+v", s.Core)
	}
	if len(s.Traffic) != 3 || s.Traffic[0].Upload || s.Traffic[0].Size != 1e9 || s.Traffic[1].Count != 20 || s.Traffic[2].Stop != 6*time.Second {
		t.Errorf("traffic %+v", s.Traffic)
	}
	if s.Duration() != 10*time.Second {
		t.Errorf("duration %v", s.Duration())
	}
	if len(s.Events) != 3 || s.Events[2].Action != ActSet || s.Events[2].Dir != DirUp || *s.Events[2].Patch.Delay != 50*time.Millisecond {
		t.Errorf("events %+v", s.Events)
	}
	if v := s.Variant("tcp"); v.Kind != KindTCP || len(v.Paths) != 1 || v.Paths[0] != "wifi" {
		t.Errorf("tcp variant %+v", v)
	}
	if v := s.Variant("mptcp"); v.Kind != KindMPTCP || len(v.Paths) != 3 {
		t.Errorf("mptcp variant %+v", v)
	}
	if v := s.Variant("mptcp-no-wifi"); v.Kind != KindMPTCP || v.Paths[0] != "cell" || len(v.Events) != 1 || v.Events[0].Action != ActRemove {
		t.Errorf("mptcp-no-wifi %+v", v)
	}
	if v := s.Variant("tcp-cell"); v.Kind != KindTCP || v.Paths[0] != "cell" {
		t.Errorf("tcp-cell %+v", v)
	}
}

func TestErrorsNameFileLineAndKey(t *testing.T) {
	cases := []struct {
		name, src, want string
	}{
		{"bare number", "paths: [{name: a, rate: 400}]", `s.yaml:1: paths[0].rate: rate "400" has no unit`},
		{"negative rate", "paths:\n  - name: a\n    rate: -4mbit", `s.yaml:3: paths[0].rate: rate "-4mbit" must not be negative`},
		{"unknown key", "paths:\n  - name: a\n    speed: 4mbit", `s.yaml:3: paths[0].speed: unknown key "speed" (valid here: `},
		{"missing trace", "paths:\n  - name: a\n    trace: nope.trace", `s.yaml:3: paths[0].trace: trace file `},
		{"bare delay", "paths: [{name: a, delay: 10}]", `paths[0].delay: duration "10" has no unit`},
		{"loss without %", "paths: [{name: a, loss: 0.01}]", `paths[0].loss: "0.01" must be a percentage`},
		{"top-level typo", "path: []", `s.yaml:1: path: unknown key "path"`},
		{"no paths", "name: x", `paths: a scenario needs at least one path`},
		{"bad path name", "paths: [{name: Wi Fi}]", `is not a valid path name`},
		{"duplicate path", "paths: [{name: a}, {name: a}]", `path name "a" is used twice`},
		{"flood on unknown path", "paths: [{name: a}]\ntraffic: [{type: udp-flood, path: b, from: 1s, to: 2s, rate: 1mbit}]", `traffic[0].path: "b" is not a path`},
		{"unknown traffic", "paths: [{name: a}]\ntraffic: [{type: video}]", `traffic[0].type: "video" is not valid (valid: bulk, flows, udp-flood)`},
		{"event without action", "paths: [{name: a}]\nevents: [{at: 1s, path: a}]", `events[0].action: every event needs an action`},
		{"variant unknown kind", "paths: [{name: a}]\nvariants: [{name: x, kind: quic}]", `variants[0].kind: "quic" is not valid`},
		{"tcp over two paths", "paths: [{name: a}, {name: b}]\nvariants: [{name: x, kind: tcp, paths: [a, b]}]", `a tcp variant runs over one path`},
		{"queue too small", "paths: [{name: a, queue: 100B}]", `cannot hold one full-size packet`},
		{"outage every too short", "paths: [{name: a, outage: {at: 1s, for: 5s, every: 2s}}]", `is not longer than the outage itself`},
		{"ambiguous mbps", "paths: [{name: a, rate: 10mbps}]", `ambiguous`},
		{"zero rate", "paths: [{name: a, rate: 0mbit}]", `must be above 0bit`},
		{"too many paths", "paths: [" + strings.Repeat("{name: p},", 17) + "]", `17 paths given; at most 16`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := writeScenario(t, c.src, nil)
			_, err := Load(f)
			if err == nil {
				t.Fatalf("no error; want %q", c.want)
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error:\n%v\nwant it to contain %q", err, c.want)
			}
			if !strings.Contains(err.Error(), f) && !strings.Contains(err.Error(), "s.yaml") {
				t.Fatalf("error does not name the file: %v", err)
			}
		})
	}
}

func TestShippedScenariosParse(t *testing.T) {
	files, _ := filepath.Glob("../../../scenarios/*.yaml")
	if len(files) == 0 {
		t.Fatal("no shipped scenarios found")
	}
	for _, f := range files {
		if _, err := Load(f); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
}

func TestPatchApply(t *testing.T) {
	r := 5 * units.Mbit
	d := 7 * time.Millisecond
	p := Patch{Rate: &r, Delay: &d, ClearTrace: true}.Apply(linkemu.Params{Trace: &linkemu.Trace{}, Loss: 0.1})
	if p.Rate != r || p.Delay != d || p.Trace != nil || p.Loss != 0.1 {
		t.Fatalf("applied %+v", p)
	}
}
