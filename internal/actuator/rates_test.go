package actuator

import (
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
	"mpsteer/internal/units"
)

// fakePacer counts the writes of its table.
type fakePacer struct {
	sets   int
	want   map[sockops.Subflow4]sockops.Cap
	refuse error
}

func (p *fakePacer) Set(want map[sockops.Subflow4]sockops.Cap) error {
	p.sets++
	if p.refuse != nil {
		return p.refuse
	}
	p.want = want
	return nil
}
func (p *fakePacer) Forget(func(sockops.Subflow4) bool) {}
func (p *fakePacer) Stats() map[string]uint64           { return nil }
func (p *fakePacer) Close(time.Duration) error          { return nil }

func newTestRates(t *testing.T, p *fakePacer) (*Rates, *Gate) {
	t.Helper()
	g := &Gate{}
	r := NewRates(RatePacing, 0, g, nil)
	r.newPacer = func(uint64, sockops.CapWay) (Pacer, error) { return p, nil }
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	return r, g
}

func caps(rate units.Rate, sfs []observe.Subflow) map[policy.SubflowID]policy.Action {
	dec := map[policy.SubflowID]policy.Action{}
	for _, sf := range sfs {
		dec[policy.ID(sf)] = policy.Action{Kind: policy.Limit, Token: sf.Token, Subflow: policy.ID(sf), Rate: rate, Policy: "ecf"}
	}
	return dec
}

// Defect 9 of the reconciler issue: the caps were rebuilt for every
// changed subflow (the whole table written once per subflow, quadratic
// per round under ecf). Now a round writes the table once, however many
// caps changed.
func TestRatesWriteTheTableOncePerRound(t *testing.T) {
	p := &fakePacer{}
	r, _ := newTestRates(t, p)
	var sfs []observe.Subflow
	for i := 0; i < 200; i++ {
		sfs = append(sfs, est(uint32(i), netip.MustParseAddr(fmt.Sprintf("10.1.%d.1", i/200)), uint16(40000+i)))
	}
	recs := r.Apply(caps(10*units.Mbit, sfs), sfs, time.Unix(100, 0))
	if p.sets != 1 || len(p.want) != 200 || len(recs) != 200 {
		t.Fatalf("%d writes of a table of %d for %d records, want 1 write of 200", p.sets, len(p.want), len(recs))
	}
	// Nothing changed: nothing written.
	r.Apply(caps(10*units.Mbit, sfs), sfs, time.Unix(101, 0))
	if p.sets != 1 {
		t.Fatalf("%d writes after a round that changed nothing", p.sets)
	}
	// Every cap lifted: one write.
	r.Apply(nil, sfs, time.Unix(102, 0))
	if p.sets != 2 || len(p.want) != 0 {
		t.Fatalf("lifting: %d writes, %d left", p.sets, len(p.want))
	}
}

// A cap's bound on what waits unsent (TCP_NOTSENT_LOWAT) goes to the
// pacer with its rate, and a changed bound is a change of the cap.
func TestRatesPassTheUnsentBound(t *testing.T) {
	p := &fakePacer{}
	r, _ := newTestRates(t, p)
	sfs := []observe.Subflow{est(1, addrA, 40001)}
	bounded := func(n units.Size) map[policy.SubflowID]policy.Action {
		dec := caps(4*units.Mbit, sfs)
		for id, a := range dec {
			a.NotSent = n
			dec[id] = a
		}
		return dec
	}
	key := sockops.Subflow4{Local: sfs[0].Local, Remote: sfs[0].Remote}
	r.Apply(bounded(5000), sfs, time.Unix(100, 0))
	if c := p.want[key]; p.sets != 1 || c.Rate != 500_000 || c.NotSent != 5000 {
		t.Fatalf("%d writes, cap %+v: want one write of 500000 B/s with 5000 B unsent at most", p.sets, c)
	}
	r.Apply(bounded(5000), sfs, time.Unix(101, 0))
	if p.sets != 1 {
		t.Fatalf("%d writes after a round that changed nothing", p.sets)
	}
	r.Apply(bounded(3000), sfs, time.Unix(102, 0))
	if c := p.want[key]; p.sets != 2 || c.NotSent != 3000 {
		t.Fatalf("%d writes, cap %+v: want the new bound (3000 B) written", p.sets, c)
	}
}

// A write the kernel refuses waits its backoff (the gate), not every
// round.
func TestRefusedCapsWaitTheirBackoff(t *testing.T) {
	p := &fakePacer{refuse: errors.New("no space left on device")}
	r, g := newTestRates(t, p)
	sfs := []observe.Subflow{est(1, addrA, 40001)}
	now := time.Unix(100, 0)
	for i := 0; i < 20; i++ {
		r.Apply(caps(10*units.Mbit, sfs), sfs, now.Add(time.Duration(i)*100*time.Millisecond))
		g.sweep()
	}
	if p.sets != 2 {
		t.Fatalf("%d writes in 2 s of refusals, want 2 (a backoff of 1 s)", p.sets)
	}
}

// slowPacer is a pacer whose caps wait for the next ACK.
type slowPacer struct {
	fakePacer
	why error
}

func (p *slowPacer) AtOnceErr() error { return p.why }

// Why caps do not take hold at once is said once, and only when a pacer
// says so.
func TestRatesSayOnceWhyCapsWaitForAnACK(t *testing.T) {
	r, _ := newTestRates(t, &fakePacer{})
	if err := r.AtOnceProblem(); err != nil {
		t.Fatalf("a pacer with no such problem: %v", err)
	}
	why := errors.New("the kernel refused the iterator")
	r = NewRates(RatePacing, 0, &Gate{}, nil)
	r.newPacer = func(uint64, sockops.CapWay) (Pacer, error) { return &slowPacer{why: why}, nil }
	if err := r.AtOnceProblem(); err != nil {
		t.Fatalf("before the pacer is loaded: %v", err)
	}
	if err := r.Ready(); err != nil {
		t.Fatal(err)
	}
	if err := r.AtOnceProblem(); !errors.Is(err, why) {
		t.Fatalf("got %v, want %v", err, why)
	}
	if err := r.AtOnceProblem(); err != nil {
		t.Fatalf("said twice: %v", err)
	}
}
