package daemon

import (
	"strings"
	"testing"

	"mpsteer/internal/config"
	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/policy"
)

// kernelLike stands in for a kernel: every feature of the catalogue is
// there but those in missing, which come with their fallbacks as
// fallbackOK says.
func kernelLike(release string, missing map[kernelfeat.Name]bool, fallbackOK bool) func(...kernelfeat.Name) *kernelfeat.Report {
	return func(names ...kernelfeat.Name) *kernelfeat.Report {
		r := &kernelfeat.Report{Kernel: release}
		for _, info := range kernelfeat.Catalogue {
			f := kernelfeat.Feature{Name: info.Name, Since: info.Since, Available: !missing[info.Name], Reason: "ok"}
			if missing[info.Name] {
				f.Reason = "the stand-in kernel lacks it"
				if info.Fallback != "" {
					f.Fallback, f.FallbackAvailable = info.Fallback, fallbackOK
				}
			}
			r.Features = append(r.Features, f)
		}
		return r
	}
}

// standIn makes probeKernel a stand-in kernel until the test ends.
func standIn(t *testing.T, probe func(...kernelfeat.Name) *kernelfeat.Report) {
	old := probeKernel
	probeKernel = probe
	t.Cleanup(func() { probeKernel = old })
}

// Debian 12's 6.1, as the matrix found it.
var debian12 = map[kernelfeat.Name]bool{kernelfeat.PathManagerSysctl: true, kernelfeat.ListenerEvents: true, kernelfeat.TCX: true,
	kernelfeat.KfuncRdonlyCast: true, kernelfeat.SockopsRTOMax: true, kernelfeat.StructOpsCC: true, kernelfeat.CoupledCC: true,
	kernelfeat.UpdateSocketProto: true}

// A config is refused for what the kernel lacks, naming the feature, the
// kernel, the version that brought it and the key; what has a fallback
// (chains on clsact, without the kfuncs) and what the config does not set
// (prefer's default rto_max) is not refused.
func TestKernelCheckRefusesWhatTheKernelLacks(t *testing.T) {
	standIn(t, kernelLike("6.1.0-50-amd64", debian12, true))
	env := policy.Env{PathManager: policy.UserspacePM}
	for src, want := range map[string]string{
		"policies: [{name: spread, from: [br0], via: [{dev: phy1}, {dev: phy2}]}]": "c.yaml:1: policies[0] (spread) needs tcx",
		"mptcpize: [/system.slice/a.service]":                                      "c.yaml:1: mptcpize needs update-socket-protocol",
		"policies:\n  - {name: prefer, paths: [eth0], rto_max: 5s}":                "c.yaml:2: policies[0] (prefer): rto_max needs sockops-rto-max",
		"rate_via: cc\npolicies: [{name: limit, rates: {eth0: 10mbit}}]":           "c.yaml:2: policies[0] (limit): rate_via: cc needs struct-ops-cc",
		"coupled: lia": "c.yaml:1: coupled needs coupled-cc",
		"policies:\n  - {name: coupled, algorithm: balia, cgroup: /a}":     "c.yaml:2: policies[0] (coupled@/a) needs coupled-cc",
		"chains: [{dev: eth0, hook: egress, act: count}]":                  "",
		"rate_via: rwnd\npolicies: [{name: limit, rates: {eth0: 10mbit}}]": "",
		"policies: [{name: limit, rates: {eth0: 10mbit}}]":                 "",
		"policies: [{name: prefer, paths: [eth0]}]":                        "",
		"policies: [{name: fullmesh}]":                                     "",
		"report_health: {}\npolicies: [{name: ramptcp}]":                   "",
	} {
		cfg, err := config.Parse("c.yaml", []byte(src), env)
		if err != nil {
			t.Fatalf("%q: %v", src, err)
		}
		err = checkKernel(cfg)
		switch {
		case want == "" && err != nil:
			t.Errorf("%q refused: %v", src, err)
		case want != "" && err == nil:
			t.Errorf("%q accepted, want %q", src, want)
		case want != "" && (!strings.HasPrefix(err.Error(), want) || !strings.Contains(err.Error(), "this kernel (6.1.0-50-amd64)") ||
			!strings.Contains(err.Error(), "it arrived in Linux 6.")):
			t.Errorf("%q: %v, want %q, the kernel and the version", src, err, want)
		}
	}
	// Without clsact either, chains are refused too.
	standIn(t, kernelLike("6.1.0-50-amd64", debian12, false))
	cfg, err := config.Parse("c.yaml", []byte("chains: [{dev: eth0, hook: egress, act: count}]"), env)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkKernel(cfg); err == nil || !strings.Contains(err.Error(), "c.yaml:1: chains[0] needs tcx") {
		t.Errorf("chains without TCX or clsact: %v", err)
	}
}

// A reload (SIGHUP, a changed file, `mpsteer policy apply`) is refused the
// same way, and the running config stays.
func TestReloadRefusesWhatTheKernelLacks(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "interval: 100ms\n")
	standIn(t, kernelLike("6.1.0-50-amd64", debian12, true))
	_, err := d.reload("/c.yaml", []byte("interval: 200ms\nmptcpize: [/system.slice/a.service]\n"))
	if err == nil || !strings.Contains(err.Error(), "mptcpize needs update-socket-protocol") {
		t.Fatalf("reload: %v", err)
	}
	if d.cfg.Interval.String() != "100ms" {
		t.Fatalf("interval %v: the refused config was applied", d.cfg.Interval)
	}
}

// A config that asks for nothing special probes nothing.
func TestKernelCheckProbesOnlyWhatTheConfigUses(t *testing.T) {
	asked := -1
	standIn(t, func(names ...kernelfeat.Name) *kernelfeat.Report {
		asked = len(names)
		return kernelLike("x", nil, true)(names...)
	})
	cfg, err := config.Parse("c.yaml", []byte("policies: [{name: backup, paths: [eth1]}]"), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if err := checkKernel(cfg); err != nil || asked != -1 {
		t.Fatalf("check %v, %d features probed", err, asked)
	}
}
