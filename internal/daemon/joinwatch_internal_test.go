package daemon

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/observe"
)

// The watch looks at a joining subflow from shortly before its fourth ACK
// is due (the SYN-ACK's time from the sample, plus the handshake's round
// trip), every joinPoll while the join is incomplete, and lets go when
// the join completes (a sample is due), when the subflow is gone, or past
// its time (the loop's recheck goes on).
func TestJoinWatchLooksWhenTheJoinIsDue(t *testing.T) {
	t0 := time.Unix(1000, 0)
	mk := func(port uint16) observe.Subflow {
		// Sampled 10 ms after its SYN-ACK; a 50 ms round trip: the
		// fourth ACK is due 40 ms after the sample.
		return observe.Subflow{Local: netip.AddrPortFrom(netip.MustParseAddr("10.2.0.1"), port),
			Remote: netip.MustParseAddrPort("10.1.0.2:5201"), SRTT: 50 * time.Millisecond, LastAckRecv: 10 * time.Millisecond,
			MPFlags: observe.FlagJoinLoc, Cookie: uint64(port)}
	}
	if due := joinDue(mk(1), t0); !due.Equal(t0.Add(40 * time.Millisecond)) {
		t.Fatalf("due %v after the sample, want 40ms", due.Sub(t0))
	}
	completes, gone, late := mk(1), mk(2), mk(3)
	state := map[uint16]observe.Subflow{1: completes, 3: late} // 2: closed
	var looked []uint16
	var failing error // every lookup's, when set
	look := func(sf observe.Subflow) (observe.Subflow, error) {
		looked = append(looked, sf.Local.Port())
		if failing != nil {
			return observe.Subflow{}, failing
		}
		sf, ok := state[sf.Local.Port()]
		if !ok {
			return observe.Subflow{}, observe.ErrNoSocket
		}
		return sf, nil
	}
	w := newJoinWatch()
	w.add([]observe.Subflow{completes, gone, late}, t0)
	from := t0.Add(40*time.Millisecond - joinLead)

	// Too early: nothing looked at, the next look when the first is due.
	done, next, _ := w.step(t0.Add(10*time.Millisecond), look)
	if done || len(looked) != 0 || !next.Equal(from) {
		t.Fatalf("early step: completed %v, looked at %v, next %v after the sample; want nothing and %v", done, looked, next.Sub(t0), from.Sub(t0))
	}
	// Due: all three looked at; the closed one leaves, the others are
	// looked at again in joinPoll.
	done, next, _ = w.step(from, look)
	if done || len(looked) != 3 || !next.Equal(from.Add(joinPoll)) || len(w.pending) != 2 {
		t.Fatalf("due step: completed %v, looked at %v, next %v, %d watched; want three looks, two left, next in %v", done, looked, next.Sub(from), len(w.pending), joinPoll)
	}
	// One completes: a sample is due; the other is still watched.
	c := state[1]
	c.MPFlags |= observe.FlagFullyEst
	state[1] = c
	looked = nil
	done, _, _ = w.step(from.Add(joinPoll), look)
	if !done || len(w.pending) != 1 {
		t.Fatalf("after the join: completed %v, %d watched; want a sample and one left", done, len(w.pending))
	}
	// Adding a watched one again keeps its times.
	w.add([]observe.Subflow{late}, t0.Add(30*time.Millisecond))
	if j := w.pending[joinKey{late.Local, late.Remote}]; !j.from.Equal(from) {
		t.Fatalf("re-added: watched from %v, want the first %v", j.from.Sub(t0), from.Sub(t0))
	}
	// A lookup that fails (not for a subflow gone) is said, and the
	// subflow stays watched; past its time (due, one more round trip, the
	// grace) it is let go.
	failing = errors.New("sock_diag lookup: operation not permitted")
	until := t0.Add(40*time.Millisecond + late.SRTT + joinGrace)
	done, next, err := w.step(until.Add(-time.Microsecond), look)
	if done || len(w.pending) != 1 || next.IsZero() || err != failing {
		t.Fatalf("just before its time, the lookup failing: completed %v, %d watched, next %v, error %v; want it still watched and the error said", done, len(w.pending), next, err)
	}
	done, next, _ = w.step(until, look)
	if done || len(w.pending) != 0 || !next.IsZero() {
		t.Fatalf("at its time: completed %v, %d watched, next %v; want it let go and nothing to look at", done, len(w.pending), next)
	}
}
