package runner

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/observe"
)

func TestShareAfter(t *testing.T) {
	ms := time.Millisecond
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	srv := netip.MustParseAddrPort("10.1.0.2:5201")
	pmap := report.PathMapper{a: "wifi", b: "cell"}
	sub := func(addr netip.Addr, port uint16, acked uint64) observe.Subflow {
		return observe.Subflow{Local: netip.AddrPortFrom(addr, port), Remote: srv, Token: 7, BytesAcked: acked}
	}
	var s []recorder.Sample
	var wifi, cell uint64
	for i := 0; i <= 20; i++ {
		at := time.Duration(i) * 100 * ms
		sfs := []observe.Subflow{sub(b, 2, cell)}
		if i < 10 {
			cell += 1000 // cell carries everything until 1 s
		} else {
			// From 1 s a new wifi subflow carries 900 of every 1000 B.
			wifi += 900
			cell += 100
			sfs = append(sfs, sub(a, 3, wifi))
		}
		sfs[0].BytesAcked = cell
		s = append(s, recorder.Sample{T: at, Client: sfs})
	}
	share, ok := shareAfter(s, pmap, true, "wifi", 1200*ms, 2000*ms)
	if !ok || share < 0.899 || share > 0.901 {
		t.Fatalf("wifi share %v (%v), want 0.9", share, ok)
	}
	if share, _ := shareAfter(s, pmap, true, "wifi", 0, 900*ms); share != 0 {
		t.Fatalf("before wifi joined: %v", share)
	}
	if _, ok := shareAfter(s, pmap, true, "wifi", 5*time.Second, 6*time.Second); ok {
		t.Fatal("a share without samples")
	}
}
