package corepin_test

import (
	"net/netip"
	"testing"

	"mpsteer/internal/lab/corepin"
	"mpsteer/internal/testutil"
)

// The program passes the verifier, and its maps take what the loader puts.
func TestLoad(t *testing.T) {
	testutil.RequireRoot(t, "loading BPF programs")
	p, err := corepin.Load([]corepin.Pair{
		{Client: netip.MustParseAddr("10.1.0.1"), Server: netip.MustParseAddr("10.101.0.2"), Links: []uint32{0, 1, 2}},
		{Client: netip.MustParseAddr("10.1.0.1"), Server: netip.MustParseAddr("10.102.0.2"), Links: []uint32{3, 4, 5}},
	}, 0x100)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	if err := p.SetAlive(1, false); err != nil {
		t.Fatal(err)
	}
	for id, want := range map[uint32]bool{0: true, 1: false, 5: true, 6: false} {
		st, err := p.Stats(id)
		if err != nil {
			t.Fatal(err)
		}
		if st.Alive != want || st.Flows != 0 {
			t.Errorf("link %d: %+v, want alive=%v and no flows", id, st, want)
		}
	}
	if _, err := corepin.Load([]corepin.Pair{{Client: netip.MustParseAddr("10.1.0.1"), Server: netip.MustParseAddr("10.101.0.2")}}, 0x100); err == nil {
		t.Error("a pair without links was accepted")
	}
}
