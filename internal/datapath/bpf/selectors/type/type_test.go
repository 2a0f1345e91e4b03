package type_test

import (
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"

	"github.com/gopacket/gopacket/layers"
)

// type selects each MPTCP packet type, and no other.
func TestType(t *testing.T) {
	h := dt.NewHarness(t)
	t.Run("packet types", dt.Both(func(t *testing.T, v6 bool, a, b string) {
		syn := func(o ...layers.TCPOption) dt.Pkt {
			p := dt.ACKPkt(v6, a, b, o...)
			p.SYN, p.ACK = true, false
			return p
		}
		synack := func(o ...layers.TCPOption) dt.Pkt { p := dt.ACKPkt(v6, a, b, o...); p.SYN = true; return p }
		fin := dt.ACKPkt(v6, a, b)
		fin.FIN = true
		rst := dt.ACKPkt(v6, a, b)
		rst.RST, rst.ACK = true, false
		cases := map[string]dt.Pkt{
			"mpc-syn": syn(dt.MPCapable), "join-syn": syn(dt.MPJoinSyn), "join-synack": synack(dt.MPJoinSynAck),
			"join-ack": dt.ACKPkt(v6, a, b, dt.MPJoinAck), "data": dt.ACKPkt(v6, a, b, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSData),
			"data-ack": dt.ACKPkt(v6, a, b, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSAck), "add-addr": dt.ACKPkt(v6, a, b, dt.AddAddr4),
			"remove-addr": dt.ACKPkt(v6, a, b, dt.RemoveAddr), "mp-prio": dt.ACKPkt(v6, a, b, dt.MPPrio),
			"mp-fail": dt.ACKPkt(v6, a, b, dt.MPFail), "fastclose": dt.ACKPkt(v6, a, b, dt.FastClose), "fin": fin, "rst": rst,
		}
		frames := map[string][]byte{}
		for name, p := range cases {
			frames[name] = dt.Build(t, p)
		}
		for name := range cases {
			_, r := h.Chain("type("+name+")", "count")
			for other, frame := range frames {
				want := uint64(0)
				if other == name {
					want = 1
				}
				if got := r(frame); got.Selected != want {
					t.Errorf("type(%s) on a %s packet: selected %d, want %d", name, other, got.Selected, want)
				}
			}
		}
		_, r := h.Chain("type(mptcp)", "count")
		if got := r(dt.Build(t, dt.ACKPkt(v6, a, b, dt.Nop, dt.Nop, dt.TSOpt))); got.Selected != 0 {
			t.Error("type(mptcp) selected a plain TCP ACK")
		}
	}))
}
