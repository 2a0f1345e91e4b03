package testutil

import (
	"testing"

	"mpsteer/internal/observe"
)

// MPTCPCounters reads the MPTCP MIB counters of a named namespace.
func MPTCPCounters(t testing.TB, ns string) observe.MPTCPCounters {
	t.Helper()
	c, err := observe.ReadMPTCPCounters(ns)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
