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
		{"outage jitter past every", "paths: [{name: a, outage: {at: 1s, for: 1s, every: 2s, jitter: 1s}}]", `paths[0].outage[0].every: 2s is not longer than the outage itself (1s, and up to 1s of jitter)`},
		{"ambiguous mbps", "paths: [{name: a, rate: 10mbps}]", `ambiguous`},
		{"zero rate", "paths: [{name: a, rate: 0mbit}]", `must be above 0bit`},
		{"too many paths", "paths: [" + strings.Repeat("{name: p},", 17) + "]", `17 paths given; at most 16`},
		{"duplicate key", "paths:\n  - name: a\n    rate: 1mbit\n    rate: 2mbit", `s.yaml:4: paths[0].rate: key "rate" is given twice (first on line 3)`},
		{"rmem too large", "hosts: {client: {rmem: 1e30GB}}\npaths: [{name: a}]", `s.yaml:1: hosts.client.rmem: size "1e30GB" is too large`},
		{"queue too large", "paths: [{name: a, queue: 1e30GB}]", `paths[0].queue: "1e30GB" is not a queue size`},
		{"preferred not a path", "paths: [{name: a}, {name: b}]\npreferred: wifi", `s.yaml:2: preferred: "wifi" is not a path of this scenario (paths: a, b)`},
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

func TestPatchApply(t *testing.T) {
	r := 5 * units.Mbit
	d := 7 * time.Millisecond
	p := Patch{Rate: &r, Delay: &d, ClearTrace: true}.Apply(linkemu.Params{Trace: &linkemu.Trace{}, Loss: 0.1})
	if p.Rate != r || p.Delay != d || p.Trace != nil || p.Loss != 0.1 {
		t.Fatalf("applied %+v", p)
	}
}

// One mistake gives one error: a value that could not be read is not
// complained about a second time (as zero, missing or invalid).
func TestOneErrorPerMistake(t *testing.T) {
	const a = "paths: [{name: a}]\n"
	cases := []struct {
		name, src, want string
	}{
		{"rate without unit", "paths:\n  - name: a\n    rate: 10", `s.yaml:3: paths[0].rate: rate "10" has no unit`},
		{"rate too large", "paths: [{name: a, rate: 1e30gbit}]", `paths[0].rate: rate "1e30gbit" is too large`},
		{"up rate without unit", "paths: [{name: a, up: {rate: 10}}]", `paths[0].up.rate: rate "10" has no unit`},
		{"trace not a value", "paths: [{name: a, trace: {f: x}}]", `paths[0].trace: must be a single value, not a mapping`},
		{"trace empty", "paths: [{name: a, trace: ''}]", `paths[0].trace: a trace needs the name of a trace file`},
		{"queue not a value", "paths: [{name: a, queue: [1]}]", `paths[0].queue: must be a single value, not a list`},
		{"outage length without unit", "paths: [{name: a, outage: {at: 1s, for: 5}}]", `paths[0].outage[0].for: duration "5" has no unit`},
		{"path name not a value", "paths: [{name: [a]}]", `paths[0].name: must be a single value, not a list`},
		{"core links out of range", a + "core: {links: 40, overrides: [{link: 1, rate: 1mbit}]}", `core.links: "40" is not valid (a whole number from 1 to 16)`},
		{"core not a mapping", "paths: [{name: a, via: core}]\ncore: 4", `core: must be a mapping of keys to values, not a value`},
		{"bulk duration without unit", a + "traffic: [{type: bulk, duration: 10}]", `traffic[0].duration: duration "10" has no unit`},
		{"flow sizes without unit", a + "traffic: [{type: flows, sizes: [10]}]", `traffic[0].sizes: size "10" has no unit`},
		{"flow sizes not values", a + "traffic: [{type: flows, sizes: [{a: 1}]}]", `traffic[0].sizes[0]: must be a single value, not a mapping`},
		{"unknown traffic type", a + "traffic: [{type: video, duration: 10s, size: 1GB}]", `traffic[0].type: "video" is not valid`},
		{"flood rate without unit", a + "traffic: [{type: udp-flood, path: a, from: 1s, to: 2s, rate: 10}]", `traffic[0].rate: rate "10" has no unit`},
		{"flood end without unit", a + "traffic: [{type: udp-flood, path: a, from: 1s, to: 2, rate: 1mbit}]", `traffic[0].to: duration "2" has no unit`},
		{"flood path not a value", a + "traffic: [{type: udp-flood, path: [a], from: 1s, to: 2s, rate: 1mbit}]", `traffic[0].path: must be a single value, not a list`},
		{"event action invalid", a + "events: [{at: 1s, path: a, action: jump}]", `events[0].action: "jump" is not valid`},
		{"event set not a mapping", a + "events: [{at: 1s, path: a, set: 5}]", `events[0].set: must be a mapping of keys to values, not a value`},
		{"event set of unknown keys", a + "events: [{at: 1s, path: a, set: {colour: red}}]", `events[0].set.colour: unknown key "colour"`},
		{"event set rate without unit", a + "events: [{at: 1s, path: a, set: {rate: 10}}]", `events[0].set.rate: rate "10" has no unit`},
		{"event path not a value", a + "events: [{at: 1s, path: [a], action: down}]", `events[0].path: must be a single value, not a list`},
		{"event time without unit", a + "traffic: [{type: bulk, duration: 5s}]\nevents: [{at: 7, path: a, action: down}]", `events[0].at: duration "7" has no unit`},
		{"variant name not a value", a + "variants: [{name: [x]}]", `variants[0].name: must be a single value, not a list`},
		{"bad traffic, late event", a + "traffic: [{type: flows, sizes: [10KiB], interval: 5}]\nevents: [{at: 30s, path: a, action: down}]", `traffic[0].interval: duration "5" has no unit`},
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
		})
	}
}

func TestEventsMustRunBeforeTheTrafficEnds(t *testing.T) {
	const head = `paths: [{name: a}, {name: b}]
traffic:
  - {type: bulk, duration: 10s}
  - {type: udp-flood, path: b, from: 1s, to: 4s, rate: 1mbit}
`
	bad := []struct {
		name, src, want string
	}{
		{"at the end", head + "events:\n  - {at: 10s, path: a, action: down}",
			`s.yaml:6: events[0].at: 10s is not before the traffic ends (at 10s): the event would never run`},
		{"after the end", head + "events:\n  - {at: 2s, path: a, action: down}\n  - {at: 1m, path: a, action: up}",
			`s.yaml:7: events[1].at: 1m0s is not before the traffic ends (at 10s)`},
		{"in a variant", head + "variants:\n  - {name: x, events: [{at: 12s, path: b, action: remove}]}",
			`s.yaml:6: variants[0].events[0].at: 12s is not before the traffic ends (at 10s)`},
	}
	for _, c := range bad {
		t.Run(c.name, func(t *testing.T) {
			_, err := Load(writeScenario(t, c.src, nil))
			if err == nil || !strings.Contains(err.Error(), c.want) || strings.Count(err.Error(), "\n") != 0 {
				t.Fatalf("err = %v\nwant exactly one error containing %q", err, c.want)
			}
		})
	}
	good := []struct{ name, src string }{
		{"just before the end", head + "events: [{at: 9999ms, path: a, action: down}]\nvariants: [{name: x, events: [{at: 9s, path: b, action: remove}]}]"},
		// A size-bound transfer has no known end: any time is accepted.
		{"size-bound only", "paths: [{name: a}]\ntraffic: [{type: bulk, size: 1GB}]\nevents: [{at: 1h, path: a, action: down}]"},
		{"size-bound beside a timed one", "paths: [{name: a}]\ntraffic: [{type: bulk, size: 1GB}, {type: bulk, duration: 2s}]\nevents: [{at: 5s, path: a, action: down}]"},
	}
	for _, c := range good {
		t.Run(c.name, func(t *testing.T) {
			if _, err := Load(writeScenario(t, c.src, nil)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// Events never extend the traffic's duration.
func TestDurationIgnoresEvents(t *testing.T) {
	s, err := Load(writeScenario(t, "paths: [{name: a}]\ntraffic: [{type: bulk, size: 1GB}]\nevents: [{at: 30s, path: a, action: down}]", nil))
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Duration(); d != 0 {
		t.Fatalf("Duration = %v, want 0 (size-bound traffic; events do not count)", d)
	}
}

func TestBulkSenderRate(t *testing.T) {
	src := `paths: [{name: a}, {name: b}]
traffic:
  - {type: bulk, duration: 20s, rate: [{at: 0s, rate: 30mbit}, {at: 10s, rate: 60mbit}]}
  - {type: bulk, duration: 5s, rate: 10mbit, start: 20s}
variants: [mptcp]
`
	s, err := Parse("s.yaml", []byte(src))
	if err != nil {
		t.Fatal(err)
	}
	r := s.Traffic[0].AppRates
	if len(r) != 2 || r[0].Rate != 30*units.Mbit || r[1].At != 10*time.Second || r[1].Rate != 60*units.Mbit {
		t.Errorf("steps %+v", r)
	}
	if r := s.Traffic[1].AppRates; len(r) != 1 || r[0].Rate != 10*units.Mbit {
		t.Errorf("one rate: %+v", r)
	}
	for _, tc := range []struct{ rate, want string }{
		{"[{at: 1s, rate: 30mbit}]", `s.yaml:2: traffic[0].rate[0].at: the first step starts the transfer: at: 0s`},
		{"[{at: 0s, rate: 30mbit}, {at: 0s, rate: 60mbit}]", `s.yaml:2: traffic[0].rate[1].at: steps go forward in time`},
		{"[{at: 0s, rate: 30mbit}, {at: 20s, rate: 60mbit}]", `s.yaml:2: traffic[0].rate[1].at: the transfer ends at 20s, before this step`},
		{"0mbit", `s.yaml:2: traffic[0].rate:`},
	} {
		bad := "paths: [{name: a}]\ntraffic: [{type: bulk, duration: 20s, rate: " + tc.rate + "}]\nvariants: [tcp]\n"
		if _, err := Parse("s.yaml", []byte(bad)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("rate %s: err = %v, want %q", tc.rate, err, tc.want)
		}
	}
}
