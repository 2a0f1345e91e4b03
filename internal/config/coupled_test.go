package config_test

import (
	"slices"
	"testing"

	"mpsteer/internal/config"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops/coupled"
)

// The coupled congestion control, as a policy (scoped or not) or the
// top-level key: bad input names the file, line and key and what is
// valid.
func TestCoupledConfig(t *testing.T) {
	checkConfigs(t, policy.Env{}, map[string]string{
		"policies: [{name: coupled, algorithm: cubic}]":               `c.yaml:1: policies[0].algorithm: "cubic" is not valid (valid: lia, balia)`,
		"policies: [{name: coupled}]":                                 `c.yaml:1: policies[0].algorithm: name the coupled congestion control (valid: lia, balia)`,
		"coupled: olia":                                               `c.yaml:1: coupled: "olia" is not valid (valid: lia, balia)`,
		"coupled: lia\npolicies: [{name: coupled, algorithm: balia}]": `c.yaml:2: policies[0].name: policy "coupled" is listed twice`,
	}, nil)
	cfg, err := config.Parse("c.yaml", []byte("coupled: balia\npolicies:\n  - {name: coupled, algorithm: lia, cgroup: /system.slice/a.service}\n"), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	req := (&policy.Engine{Policies: cfg.Policies}).Requirements()
	want := []policy.CoupledScope{{Algorithm: "balia"}, {Cgroup: "/system.slice/a.service", Algorithm: "lia"}}
	if !slices.Equal(req.Coupled, want) {
		t.Errorf("requirements %+v, want %+v", req.Coupled, want)
	}
	if !slices.Contains(cfg.PolicyKeys, "coupled: balia") {
		t.Errorf("policy keys %q", cfg.PolicyKeys)
	}
}

// The policy offers what the BPF package has.
func TestCoupledAlgorithmsAreTheBPFOnes(t *testing.T) {
	if !slices.Equal(policy.CoupledAlgorithms, coupled.Names()) {
		t.Errorf("policy offers %v, internal/sockops/coupled has %v", policy.CoupledAlgorithms, coupled.Names())
	}
}
