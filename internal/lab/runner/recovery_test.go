package runner

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
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
	// A window that starts 1 ms before the sample at 900 ms: the interval
	// from 800 ms (cell only) counts by its hundredth inside the window,
	// not whole (whole, wifi's share would be 900/2000).
	share, ok = shareAfter(s, pmap, true, "wifi", 899*ms, 1000*ms)
	if want := 900 / (0.01*1000 + 1000); !ok || share < want-0.001 || share > want+0.001 {
		t.Fatalf("wifi share from 899 ms: %v (%v), want %.4f", share, ok, want)
	}
	// A window that ends halfway between samples counts half the last
	// interval: wifi's share is still 0.9, from 1.25 s to 1.75 s.
	share, ok = shareAfter(s, pmap, true, "wifi", 1250*ms, 1750*ms)
	if !ok || share < 0.899 || share > 0.901 {
		t.Fatalf("wifi share 1.25-1.75 s: %v (%v), want 0.9", share, ok)
	}
}

// The return to the scenario's preferred path: from its first link-up to
// the first data segment on it, and its share of the bytes in the 4 s
// from that link-up; a return that never came counts as the time to the
// end of the samples.
func TestPreferredReturn(t *testing.T) {
	ms := time.Millisecond
	a, b := netip.MustParseAddr("10.2.0.1"), netip.MustParseAddr("10.1.0.1")
	srv := netip.MustParseAddrPort("10.1.0.2:5201")
	w := &world.World{Plan: world.Plan{Paths: []world.PathInfo{
		{Name: "cell", Link: "path-cell", Client: world.PathEnd{Addr: b}},
		{Name: "wifi", Link: "path-wifi", Client: world.PathEnd{Addr: a}},
	}}}
	r := &variantRun{s: &scenario.Scenario{Preferred: "wifi"}, w: w, upload: true}
	// Cell carries 1000 B per 100 ms sample until 7.1 s; wifi from then on.
	var s []recorder.Sample
	var wifi, cell uint64
	for i := 0; i <= 120; i++ {
		at := time.Duration(i) * 100 * ms
		if at <= 7100*ms {
			cell += 1000
		} else {
			wifi += 1000
		}
		s = append(s, recorder.Sample{T: at, Client: []observe.Subflow{
			{Local: netip.AddrPortFrom(b, 1), Remote: srv, Token: 7, BytesAcked: cell},
			{Local: netip.AddrPortFrom(a, 2), Remote: srv, Token: 7, BytesAcked: wifi},
		}})
	}
	origin := 50 * time.Second // the emulator's clock at the transfer's start
	links := map[string]world.LinkState{"path-wifi": {Up: world.DirState{Origin: origin, Ups: []linkemu.UpRecord{
		{UpAt: origin + 7*time.Second, FirstDataAt: origin + 7*time.Second + 64*ms},
		{UpAt: origin + 9*time.Second, FirstDataAt: origin + 9*time.Second + 500*ms},
	}}}}
	sum := &report.Summary{Metrics: map[string]float64{}}
	r.preferredReturn(sum, links, s)
	if sum.LinkUpToFirstDataMs == nil || *sum.LinkUpToFirstDataMs != 64 {
		t.Fatalf("link-up to first data %v, want 64 ms (the first link-up)", sum.LinkUpToFirstDataMs)
	}
	// 7.0–11.0 s: cell's 1000 B of the sample at 7.1 s, wifi's 39 samples.
	if sh := sum.PreferredShareAfterReturn; sh == nil || *sh < 0.974 || *sh > 0.976 {
		t.Fatalf("share after the return %v, want 39/40", sh)
	}
	// No data after the link-up: the time to the end of the samples.
	links["path-wifi"].Up.Ups[0].FirstDataAt = 0
	sum = &report.Summary{Metrics: map[string]float64{}}
	r.preferredReturn(sum, links, s)
	if sum.LinkUpToFirstDataMs == nil || *sum.LinkUpToFirstDataMs != 5000 {
		t.Fatalf("no data: %v, want 5000 ms (to the end)", sum.LinkUpToFirstDataMs)
	}
	// A scenario without a preferred path has neither figure.
	r.s.Preferred = ""
	sum = &report.Summary{Metrics: map[string]float64{}}
	r.preferredReturn(sum, links, s)
	if sum.LinkUpToFirstDataMs != nil || sum.PreferredShareAfterReturn != nil {
		t.Fatal("figures without a preferred path")
	}
}
