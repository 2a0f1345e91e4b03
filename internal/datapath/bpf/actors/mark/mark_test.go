package mark_test

import (
	"bytes"
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"
)

// mark sets the skb's mark and its priority (a tc classid), each only when
// asked, and leaves the packet's bytes alone.
func TestMark(t *testing.T) {
	h := dt.NewHarness(t)
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	_, both := h.Chain("", "mark(mark=0x2a, classid=1:10)")
	if got := both(in); got.Mark != 0x2a || got.Priority != 0x10010 || !bytes.Equal(got.Out, in) {
		t.Errorf("mark and classid: mark %#x priority %#x, changed=%v", got.Mark, got.Priority, !bytes.Equal(got.Out, in))
	}
	_, markOnly := h.Chain("", "mark(7)")
	if got := markOnly(in); got.Mark != 7 || got.Priority != 0 {
		t.Errorf("mark alone: mark %#x priority %#x", got.Mark, got.Priority)
	}
	_, classOnly := h.Chain("", "mark(classid=1:20)")
	if got := classOnly(in); got.Mark != 0 || got.Priority != 0x10020 {
		t.Errorf("classid alone: mark %#x priority %#x", got.Mark, got.Priority)
	}
}
