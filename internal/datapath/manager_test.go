package datapath

import (
	"testing"

	"mpsteer/internal/testutil"
)

// newTestManager loads a manager (as root), closed when the test ends.
// The fixture tests use datapathtest's harness; these tests look inside.
func newTestManager(t *testing.T) *Manager {
	t.Helper()
	testutil.RequireRoot(t, "loading BPF programs")
	m, err := NewManager()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}
