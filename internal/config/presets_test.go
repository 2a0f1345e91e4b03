package config

import (
	"net/netip"
	"os"
	"strings"
	"testing"

	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// presetEnv is a host with wlan0, wwan0, eth0 and usb0, under pmName.
func presetEnv(pmName string) policy.Env {
	ifs := map[string][]netip.Addr{
		"wlan0": {netip.MustParseAddr("10.1.0.1")}, "wwan0": {netip.MustParseAddr("10.2.0.1")},
		"eth0": {netip.MustParseAddr("10.3.0.1")}, "usb0": {netip.MustParseAddr("10.4.0.1")},
	}
	return policy.Env{PathManager: pmName,
		Interfaces: func() map[string][]netip.Addr { return ifs },
		Addrs:      func(n string) ([]netip.Addr, bool) { a, ok := ifs[n]; return a, ok }}
}

// expanded parses a config and returns its policies' canonical entries.
func expanded(t *testing.T, src, pmName string) ([]string, error) {
	t.Helper()
	cfg, err := Parse("c.yaml", []byte(src), presetEnv(pmName))
	if err != nil {
		return nil, err
	}
	var out []string
	for _, k := range cfg.PolicyKeys {
		out = append(out, strings.Join(strings.Fields(k), " "))
	}
	return out, nil
}

func TestModeExpandsIntoPolicies(t *testing.T) {
	modeEndpoints = func() ([]pm.Endpoint, error) { return nil, nil }
	cases := []struct {
		name, src, pm string
		want          []string
	}{
		{"handover: the master preferred, the rest backup while it is viable",
			"mode: {service: handover, interfaces: {wlan0: master, wwan0: on}}", policy.KernelPM,
			[]string{"mode: name: prefer paths: - wlan0"}},
		{"handover without master: the first of allow",
			"mode: {service: handover, allow: [eth0, wlan0]}", policy.KernelPM,
			[]string{"mode: name: prefer paths: - eth0"}},
		{"interactive: every usable path ranked, tight δ",
			"mode: {service: interactive, interfaces: {wwan0: on, wlan0: master, eth0: backup}, deny: [usb0]}", policy.KernelPM,
			[]string{"mode: name: backup paths: - eth0", "mode: k: 1.25 name: prefer paths: - wlan0 - wwan0"}},
		{"aggregate under the kernel PM: no policy (the kernel's default)",
			"mode: {service: aggregate}", policy.KernelPM, nil},
		{"aggregate under the userspace PM: fullmesh, one subflow per pair, off excluded",
			"mode: {service: aggregate, interfaces: {usb0: off, wwan0: backup}}", policy.UserspacePM,
			[]string{"mode: name: backup paths: - wwan0", "mode: exclude: - usb0 name: fullmesh subflows_per_pair: 1"}},
		{"allow list under the userspace PM",
			"mode: {allow: [wlan0, wwan0], interfaces: {wwan0: backup}}", policy.UserspacePM,
			[]string{"mode: name: backup paths: - wwan0", "mode: interfaces: - wlan0 - wwan0 name: fullmesh subflows_per_pair: 1"}},
		{"per-interface modes only: master preferred",
			"mode: {interfaces: {eth0: master, wwan0: backup}}\npolicies: [{name: dynthresh}]", policy.KernelPM,
			[]string{"mode: name: backup paths: - wwan0", "mode: name: prefer paths: - eth0", "name: dynthresh"}},
	}
	for _, c := range cases {
		got, err := expanded(t, c.src, c.pm)
		if err != nil {
			t.Errorf("%s: %v", c.name, err)
			continue
		}
		if strings.Join(got, " | ") != strings.Join(c.want, " | ") {
			t.Errorf("%s:\n got  %q\n want %q", c.name, got, c.want)
		}
	}
}

func TestModeErrorsNameTheKey(t *testing.T) {
	// Under the kernel PM, usb0 has an endpoint that opens subflows.
	modeEndpoints = func() ([]pm.Endpoint, error) {
		return []pm.Endpoint{{ID: 3, Addr: netip.MustParseAddr("10.4.0.1"), Flags: pm.FlagSubflow},
			{ID: 4, Addr: netip.MustParseAddr("10.2.0.1"), Flags: pm.FlagBackup}}, nil
	}
	defer func() { modeEndpoints = func() ([]pm.Endpoint, error) { return nil, nil } }()
	cases := map[string]string{
		"mode: {service: fast}":                                                                `c.yaml:1: mode.service: "fast" is not valid (valid: handover, interactive, aggregate)`,
		"mode: {interfaces: {wlan0: sometimes}}":                                               `mode.interfaces.wlan0: "sometimes" is not valid (valid: on, off, backup, master)`,
		"mode: {interfaces: {nosuch0: on}}":                                                    `mode.interfaces: "nosuch0" is not an interface of this host`,
		"mode: {service: handover}":                                                            `mode.service: handover needs a primary interface`,
		"mode: {service: handover, interfaces: {wlan0: master, eth0: master}}":                 `handover has one primary interface`,
		"mode: {service: aggregate, interfaces: {wlan0: master}}":                              `mode.interfaces: wlan0 is master, but aggregate uses every interface at once`,
		"mode: {allow: [wlan0], deny: [wlan0]}":                                                `mode.deny: "wlan0" is both allowed and denied`,
		"mode: {interfaces: {wwan0: backup}, deny: [wwan0]}":                                   `mode.interfaces: wwan0 is backup but denied`,
		"mode: {interfaces: {usb0: off}}":                                                      `mode.interfaces: usb0 may carry no subflow, but the kernel path manager's endpoint 3 (10.4.0.1, subflow) opens them there: remove it (ip mptcp endpoint delete id 3)`,
		"mode: {allow: [wlan0, wwan0]}":                                                        `mode.allow: usb0 may carry no subflow, but the kernel path manager's endpoint 3`,
		"mode: {colour: blue}":                                                                 `mode.colour: unknown key "colour"`,
		"mode: {service: handover, allow: [wlan0]}\npolicies: [{name: prefer, paths: [eth0]}]": `mode.service: service: handover builds a prefer policy, and policies[0] is one too`,
	}
	for src, want := range cases {
		_, err := expanded(t, src, policy.KernelPM)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v\nwant %q", src, err, want)
		}
	}
	// The endpoint with only the backup flag opens nothing: wwan0 off is fine.
	if _, err := expanded(t, "mode: {interfaces: {wwan0: off}}", policy.KernelPM); err != nil {
		t.Errorf("off on an interface whose endpoint opens no subflow: %v", err)
	}
}

// A reload with the same mode keeps the policies it built (and their
// state); a changed mode rebuilds them.
func TestReloadKeepsModePolicies(t *testing.T) {
	modeEndpoints = func() ([]pm.Endpoint, error) { return nil, nil }
	a, _ := expanded(t, "mode: {service: handover, interfaces: {wlan0: master}}", policy.KernelPM)
	b, _ := expanded(t, "mode:\n  # same, in block style\n  interfaces:\n    wlan0: master\n  service: handover\n", policy.KernelPM)
	if len(a) != 1 || a[0] != b[0] {
		t.Fatalf("the same mode written two ways expands differently: %q vs %q", a, b)
	}
}

// The packaged default config parses and runs no policy; its commented
// mode section, uncommented, parses too on a host with the interfaces it
// names, and expands into what docs/daemon.md ("Presets") says: handover
// with wlan0 as master is prefer on wlan0, wwan0 backup is the backup
// policy on it, and under the userspace path manager fullmesh opens one
// subflow per address pair on the allowed interfaces (not on the denied
// docker0).
func TestDefaultConfigParses(t *testing.T) {
	modeEndpoints = func() ([]pm.Endpoint, error) { return nil, nil }
	const file = "../../deploy/mpsteer.yaml"
	cfg, err := Load(file, policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 0 {
		t.Fatalf("the default config runs %d policies; it must run none", len(cfg.Policies))
	}
	src, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	uncommented, n := uncommentMode(string(src))
	if n < 2 {
		t.Fatalf("%s has no commented mode section (a line \"#mode:\" and its indented lines) to uncomment", file)
	}
	ifs := map[string][]netip.Addr{
		"wlan0": {netip.MustParseAddr("10.1.0.1")}, "wwan0": {netip.MustParseAddr("10.2.0.1")},
		"docker0": {netip.MustParseAddr("172.17.0.1")},
	}
	for pmName, want := range map[string][]string{
		policy.KernelPM:    {"mode: name: backup paths: - wwan0", "mode: name: prefer paths: - wlan0"},
		policy.UserspacePM: {"mode: name: backup paths: - wwan0", "mode: name: prefer paths: - wlan0", "mode: interfaces: - wlan0 - wwan0 name: fullmesh subflows_per_pair: 1"},
	} {
		env := policy.Env{PathManager: pmName, Interfaces: func() map[string][]netip.Addr { return ifs },
			Addrs: func(n string) ([]netip.Addr, bool) { a, ok := ifs[n]; return a, ok }}
		cfg, err := Parse(file, []byte(uncommented), env)
		if err != nil {
			t.Fatalf("%s with its mode section uncommented (%d lines), %s path manager: %v\n%s", file, n, pmName, err, uncommented)
		}
		var got []string
		for _, k := range cfg.PolicyKeys {
			got = append(got, strings.Join(strings.Fields(k), " "))
		}
		if strings.Join(got, "\n") != strings.Join(want, "\n") {
			t.Errorf("%s path manager: the example's mode expands into\n%s\nwant\n%s", pmName, strings.Join(got, "\n"), strings.Join(want, "\n"))
		}
	}
}

// uncommentMode uncomments the commented mode section of a config: the
// line "#mode:" and the commented, indented lines that follow it. It
// returns the config and how many lines it uncommented.
func uncommentMode(src string) (string, int) {
	lines := strings.Split(src, "\n")
	n := 0
	for i, l := range lines {
		switch {
		case n == 0 && l == "#mode:":
		case n > 0 && strings.HasPrefix(l, "#  "):
		default:
			if n > 0 {
				return strings.Join(lines, "\n"), n
			}
			continue
		}
		lines[i] = strings.TrimPrefix(l, "#")
		n++
	}
	return strings.Join(lines, "\n"), n
}
