package drop_test

import (
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"
)

// drop drops what the chain selected, counted as dropped, and nothing
// else.
func TestDrop(t *testing.T) {
	h := dt.NewHarness(t)
	id, drop := h.Chain("type(data-ack)", "count drop")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	if got := drop(in); got.Ret != dt.TCXDrop {
		t.Errorf("selected packet: ret %d, want %d (drop)", got.Ret, dt.TCXDrop)
	}
	other := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSData))
	if got := drop(other); got.Ret != dt.TCXNext {
		t.Errorf("packet not selected: ret %d, want %d (next)", got.Ret, dt.TCXNext)
	}
	st, err := h.M.Status(id)
	if err != nil || st.Dropped != 1 || st.Steps[1].Packets != 1 {
		t.Fatalf("dropped %d, counted %d, want 1 and 1 (%v)", st.Dropped, st.Steps[1].Packets, err)
	}
}
