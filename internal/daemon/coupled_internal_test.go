package daemon

import (
	"reflect"
	"testing"

	"mpsteer/internal/policy"
	"mpsteer/internal/sockops/coupled"
)

// Each cgroup gets the first algorithm listed for it; unscoped is "/".
func TestCoupledScopes(t *testing.T) {
	got := coupledScopes([]policy.CoupledScope{
		{Cgroup: "/b.slice", Algorithm: "balia"},
		{Algorithm: "lia"},
		{Cgroup: "/a.slice", Algorithm: "lia"},
		{Cgroup: "/b.slice", Algorithm: "lia"}, // taken by balia
		{Algorithm: "balia"},                   // "/" taken by lia
	})
	want := map[coupled.Algorithm][]string{"lia": {"/", "/a.slice"}, "balia": {"/b.slice"}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("scopes %v, want %v", got, want)
	}
	if got := coupledScopes(nil); len(got) != 0 {
		t.Errorf("no requirement: %v", got)
	}
}
