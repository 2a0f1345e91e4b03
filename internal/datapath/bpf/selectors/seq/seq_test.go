package seq_test

import (
	"testing"

	dt "mpsteer/internal/datapath/datapathtest"
)

// seq selects by subflow sequence number, dseq by the data sequence
// number of a DSS mapping, with ranges that wrap.
func TestSeq(t *testing.T) {
	h := dt.NewHarness(t)
	t.Run("sequence ranges", dt.Both(func(t *testing.T, v6 bool, a, b string) {
		for sel, want := range map[string]uint64{
			"seq(1000, 1001)": 1, "seq(0, 1000)": 0, "seq(4294967000, 2000)": 1, // wraps
			"seq(0, 4294967296)": 1, "seq(1001, 1000)": 0, // every number but 1000
			"dseq(4096, 4097)": 1, "dseq(0, 4096)": 0,
		} {
			_, r := h.Chain(sel, "count")
			if got := r(dt.Build(t, dt.ACKPkt(v6, a, b, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSData))); got.Selected != want {
				t.Errorf("%s on a DSS mapping at DSN 4096, seq 1000: selected %d, want %d", sel, got.Selected, want)
			}
		}
		_, r := h.Chain("dseq(0, 100000)", "count")
		if got := r(dt.Build(t, dt.ACKPkt(v6, a, b, dt.DSSAck))); got.Selected != 0 {
			t.Errorf("dseq selected a packet without a mapping")
		}
	}))
}
