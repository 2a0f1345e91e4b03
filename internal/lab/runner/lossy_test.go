package runner

import (
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/lab/recorder"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/units"
)

// The lossy period's figures from the sender's subflows: p1 sends 3000 B
// of new data per sample throughout; p2 sends 1000 B until 1 s, then, lossy,
// 1500 B per sample of which 500 B are retransmissions.
func TestLossMetrics(t *testing.T) {
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	srv := netip.MustParseAddrPort("10.1.0.2:5201")
	sub := func(addr netip.Addr, port uint16, sent, retx uint64) observe.Subflow {
		return observe.Subflow{Local: netip.AddrPortFrom(addr, port), Remote: srv, Token: 7, BytesSent: sent, BytesRetrans: retx,
			TotalRetrans: uint32(retx / 500)}
	}
	var samples []recorder.Sample
	var p1, p2, p2retx uint64
	for i := 0; i <= 30; i++ {
		at := time.Duration(i) * 100 * time.Millisecond
		samples = append(samples, recorder.Sample{T: at, Client: []observe.Subflow{sub(a, 1, p1, 0), sub(b, 2, p2, p2retx)}})
		p1 += 3000
		if at < time.Second {
			p2 += 1000
		} else {
			p2 += 1500
			p2retx += 500
		}
	}
	loss := func(f float64) *units.Fraction { x := units.Fraction(f); return &x }
	s := &scenario.Scenario{Events: []scenario.Event{
		{At: 500 * time.Millisecond, Path: "p1", Action: scenario.ActDown},
		{At: time.Second, Path: "p2", Action: scenario.ActSet, Dir: scenario.DirDown, Patch: scenario.Patch{Loss: loss(0.2)}}, // the ACKs' direction: not this
		{At: time.Second, Path: "p2", Action: scenario.ActSet, Dir: scenario.DirUp, Patch: scenario.Patch{Loss: loss(0.2)}},
		{At: 2 * time.Second, Path: "p2", Action: scenario.ActSet, Dir: scenario.DirUp, Patch: scenario.Patch{Loss: loss(0)}},
	}}
	w := &world.World{Plan: world.Plan{Paths: []world.PathInfo{
		{Name: "p1", Client: world.PathEnd{Addr: a}}, {Name: "p2", Client: world.PathEnd{Addr: b}}}}}
	r := &variantRun{s: s, v: &scenario.Variant{Name: "mptcp"}, w: w, upload: true}

	path, from, to, ok := r.lossyPeriod(3 * time.Second)
	if !ok || path != "p2" || from != time.Second || to != 2*time.Second {
		t.Fatalf("lossy period %s %v–%v (%v), want p2 1s–2s", path, from, to, ok)
	}
	sum := &report.Summary{Metrics: map[string]float64{}}
	r.lossMetrics(sum, samples)
	// From 1 s to 2 s: p1 30000 B new, p2 15000 B sent of which 5000 B
	// retransmitted, so 10000 B new.
	if got, want := sum.Metrics["bad_share"], 10000.0/40000; !near(got, want) {
		t.Errorf("bad_share %v, want %v", got, want)
	}
	if got, want := sum.Metrics["retx_on_bad"], 5000.0/10000; !near(got, want) {
		t.Errorf("retx_on_bad %v, want %v", got, want)
	}
	if got := sum.Metrics["retransmits_in_period"]; got != 10 {
		t.Errorf("retransmits_in_period %v, want 10 segments", got)
	}
	if _, ok := sum.Metrics["reaction_ms"]; ok {
		t.Error("reaction_ms without a daemon")
	}

	// A download sends from the server: a loss on the up direction hits
	// only ACKs, so it makes no lossy period; one on the down direction does.
	r.upload = false
	r.s = &scenario.Scenario{Events: []scenario.Event{s.Events[0], s.Events[2], s.Events[3]}}
	if _, _, _, ok := r.lossyPeriod(3 * time.Second); ok {
		t.Error("a loss on the ACKs' direction taken as the data's")
	}
	r.s = s
	if _, from, _, ok := r.lossyPeriod(3 * time.Second); !ok || from != time.Second {
		t.Errorf("download: the loss on the data's direction (down) not found: from %v (%v)", from, ok)
	}
	// Without an event ending it, the period runs to the end.
	r.upload = true
	r.s = &scenario.Scenario{Events: s.Events[:3]}
	if _, _, to, ok := r.lossyPeriod(3 * time.Second); !ok || to != 3*time.Second {
		t.Errorf("open period ends at %v (%v), want 3s", to, ok)
	}
	// No loss event: no figures.
	r.s = &scenario.Scenario{Events: s.Events[:1]}
	sum = &report.Summary{Metrics: map[string]float64{}}
	r.lossMetrics(sum, samples)
	if _, ok := sum.Metrics["bad_share"]; ok {
		t.Error("bad_share without a lossy period")
	}
}

func near(a, b float64) bool { return a > b-1e-9 && a < b+1e-9 }

// reaction_ms: from the lossy period's event, as applied, to the sending
// daemon's first applied action that set the lossy path backup.
func TestReaction(t *testing.T) {
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	loss := units.Fraction(0.2)
	s := &scenario.Scenario{Events: []scenario.Event{
		{At: time.Second, Path: "p2", Action: scenario.ActSet, Dir: scenario.DirUp, Patch: scenario.Patch{Loss: &loss}}}}
	w := &world.World{Plan: world.Plan{Paths: []world.PathInfo{
		{Name: "p1", Client: world.PathEnd{Addr: a}}, {Name: "p2", Client: world.PathEnd{Addr: b}}}}}
	r := &variantRun{s: s, v: &scenario.Variant{Name: "mptcp+ramptcp"}, w: w, upload: true}
	t0 := time.Unix(1000, 0)
	yes, no := true, false
	rec := func(after time.Duration, target string, backup *bool, result string) api.ActionRecord {
		return api.ActionRecord{At: t0.Add(after), Kind: "backup", Target: target, Backup: backup, Result: result}
	}
	st := &api.Status{Actions: []api.ActionRecord{
		rec(-time.Second, "endpoint 10.2.0.1", &yes, "applied"),                   // before the loss
		rec(10*time.Millisecond, "endpoint 10.1.0.1", &yes, "applied"),            // another path
		rec(20*time.Millisecond, "endpoint 10.2.0.1", &no, "applied"),             // not backup
		rec(30*time.Millisecond, "10.2.0.10:4000→10.1.0.2:5201", &yes, "applied"), // another address
		rec(40*time.Millisecond, "endpoint 10.2.0.1", &yes, "refused"),
		rec(55*time.Millisecond, "10.2.0.1:4000→10.1.0.2:5201", &yes, "applied"),
	}}
	sum := &report.Summary{Events: []report.EventRecord{{AtS: 1.0, Path: "p2", Action: "set", At: t0}},
		Daemon: map[string]any{"client": st}}
	if ms, ok := r.reaction(sum, "p2", time.Second); !ok || ms != 55 {
		t.Errorf("reaction %v ms (%v), want 55", ms, ok)
	}
	// Records that begin after the event are complete while the daemon
	// kept all it had; when it kept its last 100, the first may be lost.
	st.Actions = st.Actions[1:]
	if ms, ok := r.reaction(sum, "p2", time.Second); !ok || ms != 55 {
		t.Errorf("reaction %v ms (%v) from 5 records, want 55", ms, ok)
	}
	for len(st.Actions) < api.RecentActions {
		st.Actions = append(st.Actions, rec(time.Second, "endpoint 10.1.0.1", &no, "applied"))
	}
	if ms, ok := r.reaction(sum, "p2", time.Second); ok {
		t.Errorf("reaction %v ms from 100 records that begin after the loss", ms)
	}
}
