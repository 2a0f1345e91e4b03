package strip_add_addr_test

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket/layers"

	dt "mpsteer/internal/datapath/datapathtest"
)

// Release puts back every ADD_ADDR a chain withheld, however many: here
// on 100 subflows, three on one of them (address ids 5, 9 and 200), with
// a selector that picks only ADD_ADDRs, so the packets that carry them
// back are not selected. Release used to widen the selector by a step per
// subflow (it failed past the chain's 32 steps) and looked for address
// ids 0 to 7 only. Each subflow's next ACK carries one option back, the
// lowest id first; then nothing is pending and packets pass unchanged.
func TestReleaseAnyNumberOfSubflows(t *testing.T) {
	h := dt.NewHarness(t)
	id, r := h.Chain("type(add-addr)", "strip_add_addr")
	const subflows = 100
	ack := func(i int, opts ...layers.TCPOption) dt.Pkt {
		p := dt.ACKPkt(false, dt.V4A, dt.V4B, opts...)
		p.Sport = uint16(20000 + i)
		return p
	}
	ids := func(i int) []byte {
		if i == 0 {
			return []byte{200, 9, 5} // the order they came in
		}
		return []byte{5}
	}
	for i := range subflows {
		for _, a := range ids(i) {
			// the kernel's bare announcement ACK: withheld and dropped
			if got := r(dt.Build(t, ack(i, dt.AddAddr4ID(a)))); got.Ret != dt.TCXDrop {
				t.Fatalf("subflow %d, ADD_ADDR id %d: ret %d, want it withheld (dropped)", i, a, got.Ret)
			}
		}
	}
	st, err := h.M.Status(id)
	if err != nil || len(st.Withheld) != subflows+2 {
		t.Fatalf("%d withheld, want %d (%v)", len(st.Withheld), subflows+2, err)
	}
	n, err := h.M.Release(id)
	if err != nil || n != subflows+2 {
		t.Fatalf("release: %d, %v; want %d", n, err, subflows+2)
	}
	if st, _ := h.M.Status(id); st.Select != "type(add-addr)" || st.ReleasePending != subflows+2 {
		t.Fatalf("after release: select %q, %d pending; want the chain as it was and %d pending", st.Select, st.ReleasePending, subflows+2)
	}
	for i := range subflows {
		want := []byte{5}
		if i == 0 {
			want = []byte{5, 9, 200}
		}
		for _, a := range want {
			in := dt.Build(t, ack(i, dt.DSSAck))
			exp := dt.Build(t, ack(i, dt.DSSAck, dt.AddAddr4ID(a)))
			got := r(in)
			if err := dt.Validate(got.Out); err != nil {
				t.Fatalf("subflow %d, ADD_ADDR id %d put back: %v", i, a, err)
			}
			if !bytes.Equal(got.Out, exp) || got.Modified != 1 || got.Selected != 0 {
				t.Fatalf("subflow %d, ADD_ADDR id %d put back: modified %d, selected %d\n got %x\nwant %x", i, a, got.Modified, got.Selected, got.Out, exp)
			}
		}
	}
	st, _ = h.M.Status(id)
	if st.ReleasePending != 0 {
		t.Fatalf("%d releases pending after every option was put back", st.ReleasePending)
	}
	for _, w := range st.Withheld {
		if !w.Released || !w.PutBack {
			t.Fatalf("%+v: not put back", w)
		}
	}
	in := dt.Build(t, ack(0, dt.DSSAck))
	if got := r(in); !bytes.Equal(got.Out, in) {
		t.Fatalf("a packet after every release was changed")
	}
	// A second release has nothing left to do.
	if n, err := h.M.Release(id); n != 0 || err != nil {
		t.Fatalf("second release: %d, %v", n, err)
	}
}
