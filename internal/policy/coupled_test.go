package policy

import (
	"slices"
	"testing"

	"mpsteer/internal/yamlcfg"
)

// A coupled policy decides nothing and requires its algorithm on its
// scope's connections.
func TestCoupledRequirements(t *testing.T) {
	m, err := yamlcfg.Parse("c.yaml", []byte("name: coupled\nalgorithm: balia\n"))
	if err != nil {
		t.Fatal(err)
	}
	p := Build(m, Env{})
	if err := m.Err(); err != nil {
		t.Fatal(err)
	}
	if a := p.Decide(&Snapshot{Conns: []*Conn{{Token: 1}}}); len(a) != 0 {
		t.Errorf("actions %v", a)
	}
	e := &Engine{Policies: []Policy{p, NewScoped(&Coupled{Algorithm: "lia"}, "/a.slice")}}
	want := []CoupledScope{{Algorithm: "balia"}, {Cgroup: "/a.slice", Algorithm: "lia"}}
	if got := e.Requirements().Coupled; !slices.Equal(got, want) {
		t.Errorf("requirements %+v, want %+v", got, want)
	}
}
