package daemon

import (
	"testing"

	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// The policies accept as many congestion controls in notsent_lowat_except
// as the sockops programs hold: more would pass the config check and then
// fail to load into the program.
func TestLowatExceptListsAgree(t *testing.T) {
	if policy.MaxLowatExcept != sockops.MaxLowatExcept {
		t.Fatalf("policy accepts %d congestion controls to except, the programs hold %d", policy.MaxLowatExcept, sockops.MaxLowatExcept)
	}
}
