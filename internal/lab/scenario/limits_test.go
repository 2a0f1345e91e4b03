package scenario

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// repeat is n copies of item, comma-separated.
func repeat(item string, n int) string {
	return strings.TrimSuffix(strings.Repeat(item+", ", n), ", ")
}

// Every bound of limits.go: one past it is an error naming the file, the
// line, the key and the valid range.
func TestBoundsNameLineKeyAndRange(t *testing.T) {
	const path = "paths: [{name: a}]\n"
	tenants := func(vms string) string {
		return "tenants:\n  links: [{name: phy1}]\n  vms:\n" + vms + "  measure: {client: vm1, server: vm2}\n"
	}
	var vms strings.Builder
	for i := 0; i < 2*MaxVMsPerHost+1; i++ {
		fmt.Fprintf(&vms, "    - {name: vm%d, on: hv%d}\n", i+1, i%2+1)
	}
	for _, c := range []struct{ name, src, want string }{
		{"rmem", "hosts:\n  client: {rmem: 2GiB}\n" + path, "s.yaml:2: hosts.client.rmem: 2GiB is out of range (valid: 0B to 1GiB)"},
		{"a VM's wmem", tenants("    - {name: vm1, on: hv1, wmem: 2GiB}\n    - {name: vm2, on: hv2}\n"), "s.yaml:4: tenants.vms[0].wmem: 2GiB is out of range (valid: 0B to 1GiB)"},
		{"VMs", tenants(vms.String()), "s.yaml:4: tenants.vms: 501 VMs given; at most 500 are supported (250 on each hypervisor)"},
		{"delay", "paths:\n  - {name: a, delay: 11s}\n", "s.yaml:2: paths[0].delay: 11s is out of range (valid: 0s to 10s)"},
		{"jitter", "paths:\n  - name: a\n    up: {jitter: 1m}\n", "s.yaml:3: paths[0].up.jitter: 1m is out of range (valid: 0s to 10s)"},
		{"queue in packets", "paths:\n  - {name: a, queue: 100001pkt}\n", "s.yaml:2: paths[0].queue: 100001pkt is out of range (valid: 1pkt to 100000pkt, or 1500B to 256MiB)"},
		{"queue in bytes", "core: {links: 1, queue: 1GiB}\npaths: [{name: a, via: core}]\n", "s.yaml:1: core.queue: 1GiB is out of range (valid: 1500B to 256MiB, or 1pkt to 100000pkt)"},
		{"outages", "paths:\n  - name: a\n    outage: [" + repeat("{at: 1s, for: 1s}", MaxOutages+1) + "]\n", "s.yaml:3: paths[0].outage: 17 outage schedules given; at most 16 per link are supported"},
		{"outage time", "paths:\n  - {name: a, outage: {at: 2h, for: 1s}}\n", "s.yaml:2: paths[0].outage[0].at: 2h is out of range (valid: 0s to 1h)"},
		{"an event's outage", path + "traffic: [{type: bulk, size: 1GB}]\nevents:\n  - {at: 1s, path: a, set: {outage: {at: 1s, for: 1s, every: 3h}}}\n", "s.yaml:4: events[0].set.outage[0].every: 3h is out of range (valid: 0s to 1h)"},
		{"traffic generators", path + "traffic: [" + repeat("{type: bulk, duration: 1s}", MaxTraffic+1) + "]\n", "s.yaml:2: traffic: 65 traffic generators given; at most 64 are supported"},
		{"start", path + "traffic:\n  - {type: bulk, start: 61m, duration: 1s}\n", "s.yaml:3: traffic[0].start: 61m is out of range (valid: 0s to 1h)"},
		{"bulk end", path + "traffic:\n  - {type: bulk, start: 40m, duration: 40m}\n", "s.yaml:3: traffic[0].duration: the generator would end at 1h20m, after the longest run (1h)"},
		{"flows", path + "traffic:\n  - {type: flows, sizes: [1KiB], count: 100001}\n", `s.yaml:3: traffic[0].count: "100001" is not valid (a whole number from 1 to 100000)`},
		{"flow interval", path + "traffic:\n  - {type: flows, sizes: [1KiB], interval: 0s}\n", "s.yaml:3: traffic[0].interval: 0s is out of range (valid: 1ms to 1h)"},
		{"flows × interval", path + "traffic:\n  - {type: flows, sizes: [1KiB], count: 100000, interval: 1s}\n", "s.yaml:3: traffic[0].count: the generator would end at 27h46m40s, after the longest run (1h)"},
		{"flow sizes", path + "traffic:\n  - {type: flows, sizes: [" + repeat("1KiB", MaxFlowSizes+1) + "]}\n", "s.yaml:3: traffic[0].sizes: 65 sizes given; at most 64 are supported"},
		{"flood rate", path + "traffic:\n  - {type: udp-flood, path: a, from: 0s, to: 1s, rate: 11gbit}\n", "s.yaml:3: traffic[0].rate: 11gbit is out of range (valid: 1bit to 10gbit)"},
		{"flood end", path + "traffic:\n  - {type: udp-flood, path: a, from: 0s, to: 2h, rate: 1mbit}\n", "s.yaml:3: traffic[0].to: 2h is out of range (valid: 0s to 1h)"},
		{"event time", path + "traffic: [{type: bulk, size: 1GB}]\nevents:\n  - {at: 2h, path: a, action: down}\n", "s.yaml:4: events[0].at: 2h is out of range (valid: 0s to 1h)"},
		{"variants", path + "variants: [" + repeat("{name: v}", MaxVariants+1) + "]\n", "s.yaml:2: variants: 33 variants given; at most 32 are supported (each is a run of its own)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse("s.yaml", []byte(c.src))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("got %v\nwant an error containing %q", err, c.want)
			}
		})
	}
}

// A scenario with every value at its bound is accepted.
func TestBoundsAreInclusive(t *testing.T) {
	var b strings.Builder
	b.WriteString(`hosts: {client: {rmem: 1GiB, wmem: 1GiB}}
paths:
  - {name: a, delay: 10s, jitter: 10s, queue: 100000pkt, outage: [` + repeat("{at: 1h, for: 59m, every: 1h}", MaxOutages) + `]}
  - {name: b, queue: 256MiB, up: {rate: 10mbit}}
traffic:
  - {type: flows, sizes: [` + repeat("1KiB", MaxFlowSizes) + `], count: 3600, interval: 1s}
  - {type: flows, sizes: [1KiB], count: 100000, interval: 1ms, start: 1m}
  - {type: udp-flood, path: a, from: 0s, to: 1h, rate: 10gbit}
  - {type: bulk, start: 30m, duration: 30m}
`)
	for i := 4; i < MaxTraffic; i++ {
		b.WriteString("  - {type: bulk, duration: 1s}\n")
	}
	b.WriteString("events: [{at: 59m, path: a, action: down}]\nvariants:\n")
	for i := 0; i < MaxVariants; i++ {
		fmt.Fprintf(&b, "  - {name: v%d}\n", i)
	}
	s, err := Parse("s.yaml", []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Traffic) != MaxTraffic || len(s.Variants) != MaxVariants || len(s.Paths[0].Up.Outages) != MaxOutages {
		t.Errorf("%d traffic, %d variants, %d outages", len(s.Traffic), len(s.Variants), len(s.Paths[0].Up.Outages))
	}
}

// The inputs in testdata/fuzz/FuzzParseScenario (`go test` runs them as the
// fuzz target's seeds too) with what each must give.
func TestFuzzRegressionInputs(t *testing.T) {
	want := map[string]string{
		// The input a fuzz worker was minimizing while the run logged 0
		// execs a second (it parses in microseconds: the minimizer's
		// quadratic passes took the minute). Its top level is a list.
		"minimized-for-a-minute": "f.yaml:4: the document must be a mapping of keys to values",
		// 1000 aliases of a variant whose events are 1000 aliases: 2.9 s
		// before yamlcfg counted aliases as copies.
		"alias-bomb":                   "f.yaml:8: variants[12]: alias *v makes the document more than 100000 values long",
		"alias-inside-its-anchor":      "f.yaml:2: variants[0].events: alias *v is inside the value anchored &v",
		"deep-nesting":                 "f.yaml:1: paths" + strings.Repeat("[0]", 63) + ": mappings and lists are nested deeper than 64 levels",
		"flows-interval-0s":            "f.yaml:2: traffic[0].interval: 0s is out of range (valid: 1ms to 1h)",
		"flows-beyond-the-longest-run": "f.yaml:2: traffic[0].count: the generator would end at 100000h, after the longest run (1h)",
		// path: best with no paths (the file says pathX:): an index into
		// an empty list of candidates, found by the fuzzer.
		"tcp-best-path-best-without-paths": "paths: a scenario needs at least one path",
	}
	files, _ := filepath.Glob("testdata/fuzz/FuzzParseScenario/*")
	if len(files) != len(want) {
		t.Errorf("%d inputs in testdata/fuzz/FuzzParseScenario, %d here", len(files), len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data := readCorpusBytes(t, f)
			_, err := Parse("f.yaml", data)
			w, ok := want[filepath.Base(f)]
			switch {
			case !ok:
				t.Fatalf("no expectation for %s", f)
			case err == nil || !strings.Contains(err.Error(), w):
				t.Fatalf("got %v\nwant an error containing %q", err, w)
			}
		})
	}
}

// readCorpusBytes reads a go test fuzz v1 file of one []byte value.
func readCorpusBytes(t *testing.T, file string) []byte {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	head, lit, _ := bytes.Cut(bytes.TrimSpace(b), []byte("\n"))
	lit, ok := bytes.CutPrefix(lit, []byte("[]byte("))
	lit, ok2 := bytes.CutSuffix(lit, []byte(")"))
	s, err := strconv.Unquote(string(lit))
	if string(head) != "go test fuzz v1" || !ok || !ok2 || err != nil {
		t.Fatalf("%s is not a go test fuzz v1 file of one []byte: %v", file, err)
	}
	return []byte(s)
}
