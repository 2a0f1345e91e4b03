package match_test

import (
	"fmt"
	"net/netip"
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"
)

// tuple and pair pick one subflow or an address pair; src and dst a
// prefix: in each direction, IPv4 and IPv6, after every option layout.
func TestMatch(t *testing.T) {
	h := dt.NewHarness(t)
	t.Run("tuple", dt.Both(func(t *testing.T, v6 bool, a, b string) {
		ep := func(s string, p int) string { return netip.AddrPortFrom(netip.MustParseAddr(s), uint16(p)).String() }
		_, r := h.Chain(fmt.Sprintf("tuple(src=%s, dst=%s)", ep(a, 5000), ep(b, 80)), "count")
		for _, l := range dt.Layouts {
			if got := r(dt.Build(t, dt.ACKPkt(v6, a, b, append(l.Pre, dt.DSSAck)...))); got.Selected != 1 || got.Ret != dt.TCXNext {
				t.Errorf("%s: matching packet: %+v", l.Name, got)
			}
			p := dt.ACKPkt(v6, a, b, l.Pre...)
			p.Sport = 5001
			if got := r(dt.Build(t, p)); got.Selected != 0 {
				t.Errorf("%s: other port selected", l.Name)
			}
			p = dt.ACKPkt(v6, b, a, l.Pre...)
			if got := r(dt.Build(t, p)); got.Selected != 0 {
				t.Errorf("%s: reverse direction selected", l.Name)
			}
		}
	}))
	t.Run("pair and prefixes", dt.Both(func(t *testing.T, v6 bool, a, b string) {
		pfx := "10.1.0.0/16"
		if v6 {
			pfx = "fd00:1::/32"
		}
		for sel, want := range map[string]uint64{
			fmt.Sprintf("pair(%s, %s)", a, b): 1, fmt.Sprintf("pair(%s, %s)", b, a): 0,
			"src(" + pfx + ")": 1, "dst(" + a + ")": 0, "dst(" + b + ")": 1,
			"not src(" + pfx + ")": 0,
		} {
			_, r := h.Chain(sel, "count")
			if got := r(dt.Build(t, dt.ACKPkt(v6, a, b))); got.Selected != want {
				t.Errorf("%s: selected %d, want %d", sel, got.Selected, want)
			}
		}
	}))
}
