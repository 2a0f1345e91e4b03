package config

import (
	"os"
	"strings"
	"testing"

	"mpsteer/internal/policy"
)

// The atsss section builds into one policy, run before the listed ones,
// and a reload keeps it while the section is the same.
func TestATSSSSectionIsTheFirstPolicy(t *testing.T) {
	src := `interval: 100ms
atsss:
  accesses: {wifi: 10.1.0.1, cell: 10.2.0.1}
  rules:
    - {name: video, match: {ports: [443]}, mode: load-balancing, split: {wifi: 70%, cell: 30%}}
  default: {mode: active-standby, active: wifi}
policies:
  - {name: limit, rates: {10.3.0.1: 5mbit}}
`
	cfg, err := Parse("c.yaml", []byte(src), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if len(cfg.Policies) != 2 || cfg.Policies[0].Name() != "atsss" || cfg.Policies[1].Name() != "limit" {
		t.Fatalf("policies %v", cfg.Policies)
	}
	if !strings.HasPrefix(cfg.PolicyKeys[0], "atsss: ") {
		t.Errorf("key %q", cfg.PolicyKeys[0])
	}
	again, err := Parse("c.yaml", []byte(src), policy.Env{})
	if err != nil || again.PolicyKeys[0] != cfg.PolicyKeys[0] {
		t.Errorf("the same section gives another key: %q, %q (%v)", again.PolicyKeys[0], cfg.PolicyKeys[0], err)
	}
	if _, ok := cfg.Policies[0].(policy.CgroupSelector); !ok {
		t.Error("the atsss policy does not say which cgroups its rules select")
	}
}

func TestATSSSSectionErrorsNameFileLineAndKey(t *testing.T) {
	src := `atsss:
  accesses: {wifi: 10.1.0.1, cell: 10.2.0.1}
  default:
    mode: load-balancing
    split: {wifi: 70%, cell: 20%}
`
	_, err := Parse("c.yaml", []byte(src), policy.Env{})
	want := "c.yaml:5: atsss.default.split: the shares add up to 90%, not 100%: wifi 70% + cell 20%"
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("err = %v, want %q", err, want)
	}
}

// The packaged config's commented atsss example builds once uncommented.
func TestPackagedATSSSExampleBuilds(t *testing.T) {
	data, err := os.ReadFile("../../deploy/mpsteer.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	in := false
	for _, l := range strings.Split(string(data), "\n") {
		switch {
		case l == "#atsss:":
			in = true
		case in && !strings.HasPrefix(l, "#  "):
			in = false
		}
		if in {
			b.WriteString(strings.TrimPrefix(l, "#") + "\n")
		}
	}
	if !strings.Contains(b.String(), "default:") {
		t.Fatalf("no atsss example found:\n%s", b.String())
	}
	cfg, err := Parse("deploy/mpsteer.yaml (atsss, uncommented)", []byte(b.String()), policy.Env{})
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policies[0].Name() != "atsss" {
		t.Errorf("policies %v", cfg.Policies)
	}
}
