package strip_add_addr_test

import (
	"bytes"
	"testing"

	"github.com/gopacket/gopacket/layers"

	dt "mpsteer/internal/datapath/datapathtest"
)

// strip_add_addr drops the kernel's bare ADD_ADDR ACK, blanks an ADD_ADDR
// beside a DSS, keeps it, and puts it back into the next packet of its
// subflow once released.
func TestStripAddAddrAndRelease(t *testing.T) {
	h := dt.NewHarness(t)
	dt.Both(func(t *testing.T, v6 bool, a, b string) {
		for _, o := range []layers.TCPOption{dt.AddAddr4, dt.AddAddr4Port, dt.AddAddr6} {
			for _, l := range dt.Layouts {
				if dt.OptLen(l.Pre)+int(o.OptionLength) > 40 {
					continue // cannot be sent
				}
				id, r := h.Chain("type(add-addr) or type(data-ack)", "strip_add_addr")
				// The kernel's own announcement ACK (no DSS) is dropped.
				p := dt.ACKPkt(v6, a, b, append(append([]layers.TCPOption{}, l.Pre...), o)...)
				in := dt.Build(t, p)
				if got := r(in); got.Ret != dt.TCXDrop || got.Modified != 1 {
					t.Fatalf("%d-byte ADD_ADDR without DSS, %s: ret %d, modified %d", o.OptionLength, l.Name, got.Ret, got.Modified)
				}
				// Beside a DSS it turns into NOPs.
				withDSS := append(append([]layers.TCPOption{}, l.Pre...), dt.DSSAck)
				if dt.OptLen(withDSS)+int(o.OptionLength) <= 40 {
					p = dt.ACKPkt(v6, a, b, append(withDSS, o)...)
					in = dt.Build(t, p)
					nops := p
					nops.Opts = withDSS
					for i := 0; i < int(o.OptionLength); i++ {
						nops.Opts = append(nops.Opts, dt.Nop)
					}
					exp := dt.Build(t, nops)
					got := r(in)
					if err := dt.Validate(got.Out); err != nil {
						t.Fatalf("%d-byte ADD_ADDR, %s: %v", o.OptionLength, l.Name, err)
					}
					if !bytes.Equal(got.Out, exp) || got.Modified != 1 || got.Ret == dt.TCXDrop {
						t.Fatalf("%d-byte ADD_ADDR, %s: modified %d\n got %x\nwant %x", o.OptionLength, l.Name, got.Modified, got.Out, exp)
					}
				}
				st, _ := h.M.Status(id)
				if len(st.Withheld) != 1 || st.Withheld[0].AddrID != uint32(o.OptionData[1]) {
					t.Fatalf("withheld %+v", st.Withheld)
				}
				// Released, it goes back into the next ACK of the subflow
				// that has room, padded with NOPs to a multiple of 4.
				if n, err := h.M.Release(id); n != 1 || err != nil {
					t.Fatalf("release: %d, %v", n, err)
				}
				next := dt.ACKPkt(v6, a, b, append(append([]layers.TCPOption{}, l.Pre...), dt.DSSAck)...)
				padded := (int(o.OptionLength) + 3) &^ 3
				if dt.OptLen(next.Opts)+padded > 40 {
					crowded := dt.Build(t, next)
					if got := r(crowded); !bytes.Equal(got.Out, crowded) {
						t.Fatalf("release into a packet without room changed it")
					}
					next = dt.ACKPkt(v6, a, b, dt.DSSAck)
				}
				want := next
				want.Opts = append(append([]layers.TCPOption{}, next.Opts...), o)
				for i := int(o.OptionLength); i%4 != 0; i++ {
					want.Opts = append(want.Opts, dt.Nop)
				}
				got := r(dt.Build(t, next))
				exp := dt.Build(t, want)
				if err := dt.Validate(got.Out); err != nil {
					t.Fatalf("release, %d-byte ADD_ADDR, %s: %v", o.OptionLength, l.Name, err)
				}
				if !bytes.Equal(got.Out, exp) {
					t.Fatalf("release, %d-byte ADD_ADDR, %s:\n got %x\nwant %x", o.OptionLength, l.Name, got.Out, exp)
				}
				// Once out, an ADD_ADDR retransmission passes untouched.
				if got := r(in); !bytes.Equal(got.Out, in) {
					t.Fatalf("after release the ADD_ADDR was stripped again")
				}
				h.M.Del(id)
			}
		}
	})(t)
}
