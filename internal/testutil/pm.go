package testutil

import (
	"net/netip"
	"testing"

	"mpsteer/internal/pm"
)

// DialPM opens a path-manager client in a named namespace, closed when
// the test ends.
func DialPM(t testing.TB, ns string) *pm.Client {
	t.Helper()
	c, err := pm.Dial(pm.Options{NetNSName: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// EndpointFlags lists a client's namespace's endpoints: address → flags.
func EndpointFlags(t testing.TB, c *pm.Client) map[netip.Addr]pm.Flags {
	t.Helper()
	eps, err := c.Endpoints()
	if err != nil {
		t.Fatal(err)
	}
	out := map[netip.Addr]pm.Flags{}
	for _, e := range eps {
		out[e.Addr] = e.Flags
	}
	return out
}
