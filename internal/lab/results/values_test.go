package results

import "testing"

// counter:HOST:NAME is an MPTCP MIB counter's move over a run: a run
// keeps only the counters that moved, so one it does not name moved by
// 0; a host without counters (a TCP variant) has no figure.
func TestCounterFigures(t *testing.T) {
	fields := map[string]any{"mptcp_counters": map[string]any{
		"client": map[string]any{"MPRstRx": 2.0, "RmAddrTx": 9.0},
		"server": map[string]any{"RmAddr": 8.0},
	}}
	for metric, want := range map[string]float64{"counter:client:MPRstRx": 2, "counter:server:RmAddr": 8, "counter:server:MPRstRx": 0} {
		if got, ok := value(fields, metric); !ok || got != want {
			t.Errorf("%s: %v %v, want %v", metric, got, ok, want)
		}
	}
	for _, metric := range []string{"counter:router:MPRstRx", "counter:client", "counter:client:"} {
		if got, ok := value(fields, metric); ok {
			t.Errorf("%s: %v, want no figure", metric, got)
		}
	}
	if _, ok := value(map[string]any{"goodput_mbit": 9.0}, "counter:client:MPRstRx"); ok {
		t.Error("a run without counters has a counter figure")
	}
}
