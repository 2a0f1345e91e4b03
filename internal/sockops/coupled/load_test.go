package coupled

import (
	"os"
	"strings"
	"testing"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/testutil"
)

// Both algorithms load, register under this process's names (listed by
// the kernel among the available congestion controls while registered)
// and unregister on Close.
func TestLoadAndRegister(t *testing.T) {
	testutil.RequireRoot(t, "loading BPF congestion controls")
	// Before 6.4 (Debian 12's 6.1) there is none: a skip naming why.
	testutil.RequireFeature(t, kernelfeat.CoupledCC)
	for _, alg := range Algorithms {
		t.Run(string(alg), func(t *testing.T) {
			c, err := New(alg, 1) // a cookie no namespace has: the selector touches nothing
			if err != nil {
				t.Fatal(err)
			}
			if !strings.HasPrefix(c.CongestionControl(), alg.prefix()+"_") {
				t.Errorf("registered as %q", c.CongestionControl())
			}
			if !available(t, c.CongestionControl()) {
				t.Errorf("%s is not among the available congestion controls", c.CongestionControl())
			}
			if err := c.Attach([]string{"/"}); err != nil {
				t.Fatal(err)
			}
			if got := c.Scopes(); len(got) != 1 || got[0] != "/" {
				t.Errorf("scopes %v", got)
			}
			if err := c.Close(); err != nil {
				t.Fatal(err)
			}
			if available(t, c.CongestionControl()) {
				t.Errorf("%s is still registered after Close", c.CongestionControl())
			}
		})
	}
}

func available(t *testing.T, name string) bool {
	b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_available_congestion_control")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range strings.Fields(string(b)) {
		if n == name {
			return true
		}
	}
	return false
}
