package count_test

import (
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"
)

// count counts the packets and bytes that reach its step; two count steps
// keep their own counters, and a packet not selected reaches neither.
func TestCount(t *testing.T) {
	h := dt.NewHarness(t)
	id, count := h.Chain("type(data-ack)", "count mark(1) count")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	for i := 0; i < 3; i++ {
		count(in)
	}
	count(dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSData)))
	st, err := h.M.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	for _, i := range []int{1, 3} {
		if s := st.Steps[i]; s.Packets != 3 || s.Bytes != 3*uint64(len(in)) {
			t.Errorf("step %d (%s): %d packets, %d bytes; want 3 and %d", i, s.Text, s.Packets, s.Bytes, 3*len(in))
		}
	}
	if st.Seen != 4 || st.Selected != 3 {
		t.Errorf("seen %d, selected %d; want 4 and 3", st.Seen, st.Selected)
	}
}
