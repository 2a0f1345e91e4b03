package testutil

import (
	"testing"

	"mpsteer/internal/lab/vethhosts"
)

// Hosts are two namespaces joined by veth pairs (see vethhosts).
type Hosts = vethhosts.Hosts

// TwoHosts builds the namespaces and removes them when the test ends.
func TwoHosts(t testing.TB, n int) Hosts {
	t.Helper()
	h, err := vethhosts.New(n)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("remove namespaces: %v", err)
		}
	})
	return h
}
