package config_test

import (
	"net/netip"
	"strings"
	"testing"

	"mpsteer/internal/config"
	"mpsteer/internal/policy"
)

func TestConfigErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"policies: []":  "",
		"interval: 100": `c.yaml:1: interval: duration "100" has no unit`,
		"policies: [{name: prefer, colour: blue}]":      `c.yaml:1: policies[0].colour: unknown key "colour"`,
		"policies:\n  - name: prefer\n  - name: prefer": `c.yaml:3: policies[1].name: policy "prefer" is listed twice`,
		"backup_via: magic":                             `backup_via: "magic" is not valid (valid: auto, endpoint, subflow)`,
		"persist: bpf/state":                            `persist: "bpf/state" is not an absolute path`,
		"polices: []":                                   `unknown key "polices"`,
	}
	checkConfigs(t, policy.Env{}, cases, nil)
}

// checkConfigs parses each config (as c.yaml) and checks the error it
// gives contains the one wanted; "" wants none, and then valid (when not
// nil) must hold of the config.
func checkConfigs(t *testing.T, env policy.Env, cases map[string]string, valid func(*config.Config) bool) {
	t.Helper()
	for src, want := range cases {
		cfg, err := config.Parse("c.yaml", []byte(src), env)
		if want == "" {
			if err != nil || valid != nil && !valid(cfg) {
				t.Errorf("%q: %v", src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", src, err, want)
		}
	}
}

// cgroup on a policy and mptcpize: bad input names the key and says what
// is valid; nothing is applied.
func TestAppScopeConfigErrorsNameTheKey(t *testing.T) {
	cases := map[string]string{
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /system.slice/backup.service}]":                                                                    "",
		"policies:\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}\n  - {name: backup, paths: [10.2.0.1], cgroup: /b}\n  - {name: backup, paths: [10.1.0.1]}": "",
		"mptcpize: [/system.slice/videocall.service, /user.slice/user-1000.slice]":                                                                               "",
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: system.slice/x}]":                                                                                  `c.yaml:1: policies[0].cgroup: "system.slice/x" is not absolute`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /}]":                                                                                               `policies[0].cgroup: / is every process on the host`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: /a/../b}]":                                                                                         `policies[0].cgroup: "/a/../b" is not a clean path (write /b)`,
		"policies: [{name: backup, paths: [10.2.0.1], cgroup: [/a]}]":                                                                                            `policies[0].cgroup: must be a single value, not a list`,
		"policies:\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}\n  - {name: backup, paths: [10.2.0.1], cgroup: /a}":                                        `c.yaml:3: policies[1].name: policy "backup@/a" is listed twice`,
		"policies: [{name: spread, cgroup: /a}]":                                                                                                                 `policies[0].cgroup: spread steers the packets of every connection`,
		"mptcpize: [system.slice/x]":                                                                                                                             `c.yaml:1: mptcpize[0]: "system.slice/x" is not absolute`,
		"mptcpize: [/a, /a]":                                                                                                                                     `mptcpize[1]: /a is listed twice`,
		"mptcpize: [{cgroup: /a}]":                                                                                                                               `mptcpize[0]: a cgroup v2 path from the hierarchy's root`,
		"mptcpize: yes":                                                                                                                                          `mptcpize[0]: "yes" is not absolute`,
	}
	checkConfigs(t, policy.Env{}, cases, nil)
}
func TestSpreadConfigErrorsNameTheKey(t *testing.T) {
	env := policy.Env{Addrs: func(d string) ([]netip.Addr, bool) {
		return nil, d == "vmbr0" || d == "phy1" || d == "phy2"
	}}
	cases := map[string]string{
		"policies: [{name: spread, from: [vmbr0], via: [phy1, phy2]}]":                 "",
		"policies: [{name: spread, from: [vmbr0], via: [phy1, eth9]}]":                 `c.yaml:1: policies[0].via[1]: this host has no device eth9`,
		"policies: [{name: spread, from: [vmbr0], via: [phy1]}]":                       `c.yaml:1: policies[0].via: 1 uplink given; spreading needs at least 2`,
		"policies:\n  - name: spread\n    from: [br7]\n    via: [phy1, phy2]":          `c.yaml:3: policies[0].from: this host has no device br7`,
		"policies:\n  - {name: spread, from: [vmbr0], via: [phy1, phy2], priority: 0}": `c.yaml:2: policies[0].priority: "0" is not valid`,
	}
	checkConfigs(t, env, cases, nil)
}

// spreadConfig spreads the VMs' subflows of one hypervisor over both links;
// peer is the other hypervisor's address suffix on the links (2 or 1).
func TestReportHealthConfig(t *testing.T) {
	checkConfigs(t, policy.Env{}, map[string]string{
		"report_health: {source: lab, window: 50ms, min_segments: 8, ports: [5201], last_hop_window: 100ms}": "",
		"report_health: {}":                       "",
		"report_health: {source: radio}":          "source",
		"report_health: {ports: [70000]}":         "ports",
		"report_health: {window: 1ms}":            "window",
		"report_health: {source: lab, colour: 1}": `unknown key "colour"`,
	}, func(cfg *config.Config) bool { return cfg.ReportHealth != nil })
}

// The endpoints section: interfaces or addresses, none listed twice, none
// both managed and left.
func TestEndpointsConfig(t *testing.T) {
	checkConfigs(t, policy.Env{}, map[string]string{
		"endpoints: {manage: [wlan0, 10.2.0.1], leave: [eth0]}": "",
		"endpoints: {manage: [wlan0, wlan0]}":                   `endpoints.manage: wlan0 is listed twice`,
		"endpoints: {manage: [wlan0], leave: [wlan0]}":          `endpoints.leave: wlan0 is both managed and left`,
		"endpoints: {manage: [\"not an interface\"]}":           `is neither an interface name nor an address`,
		"endpoints: {own: [wlan0]}":                             `unknown key "own"`,
	}, func(cfg *config.Config) bool { return len(cfg.Endpoints.Manage)+len(cfg.Endpoints.Leave) > 0 })
}
