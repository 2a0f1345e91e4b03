package daemon

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"time"

	"mpsteer/internal/observe"
)

// A subflow that joined as backup carries nothing until an MP_PRIO has
// reached it, and the kernel sends one only once the join has completed:
// the fourth ACK, the peer's answer to the third, a round trip after the
// SYN-ACK. No event says so (MPTCP_EVENT_SUB_ESTABLISHED comes with the
// SYN-ACK), and extra samples come at most every minSampleGap, so the
// MP_PRIO used to follow the join by up to that gap, while default MPTCP
// sends on the joiner as soon as the fourth ACK is in.
// The join watch looks at each such subflow alone, from shortly before its
// join should complete, every joinPoll (a lookup in the kernel's hash
// table, not a walk of every socket: observe.Sampler.Lookup), and asks for
// a sample at once when the join has completed. The round that sample
// starts sends the MP_PRIO: the watch only tells the loop when to look.

const (
	// joinLead: the watch starts this long before a join's fourth ACK is
	// due. The SYN-ACK's time is known to a jiffy (up to 4 ms) and the
	// ACK may meet a queue.
	joinLead = 5 * time.Millisecond
	// joinPoll: how often a watched subflow is looked at.
	joinPoll = time.Millisecond
	// joinGrace: how long past its due time (besides one more round
	// trip) a join is watched. After that the 20 ms recheck of the loop
	// covers it (a lost third ACK waits for its retransmission timer).
	joinGrace = 20 * time.Millisecond
)

// joinKey names a subflow by its four-tuple.
type joinKey struct{ local, remote netip.AddrPort }

// watchedJoin is a joining subflow as sampled, and when to look at it,
// from and until.
type watchedJoin struct {
	sf          observe.Subflow
	from, until time.Time
}

// joinWatch holds the joining subflows to watch.
type joinWatch struct {
	mu      sync.Mutex
	pending map[joinKey]watchedJoin
	kick    chan struct{}
}

func newJoinWatch() *joinWatch {
	return &joinWatch{pending: map[joinKey]watchedJoin{}, kick: make(chan struct{}, 1)}
}

// joinDue is when a joining subflow's join should complete: its SYN-ACK
// came LastAckRecv before the sample (no other ACK has reached it yet),
// and the fourth ACK a round trip later (SRTT: the handshake's, the only
// one it has).
func joinDue(sf observe.Subflow, sampled time.Time) time.Time {
	return sampled.Add(sf.SRTT - sf.LastAckRecv)
}

// add watches the joining subflows a round reported (sampled at
// sampled); one already watched keeps its times.
func (w *joinWatch) add(sfs []observe.Subflow, sampled time.Time) {
	if len(sfs) == 0 {
		return
	}
	w.mu.Lock()
	for _, sf := range sfs {
		k := joinKey{sf.Local, sf.Remote}
		if _, ok := w.pending[k]; ok {
			continue
		}
		due := joinDue(sf, sampled)
		w.pending[k] = watchedJoin{sf: sf, from: due.Add(-joinLead), until: due.Add(sf.SRTT + joinGrace)}
	}
	w.mu.Unlock()
	select {
	case w.kick <- struct{}{}:
	default:
	}
}

// step looks at the subflows whose time has come: a completed join (or a
// subflow gone) leaves the watch, and so does one watched past its time.
// It says whether a join completed (sample now), when to look next
// (zero: nothing is watched), and a lookup's error other than a subflow
// gone (the subflow stays watched until its time).
func (w *joinWatch) step(now time.Time, look func(observe.Subflow) (observe.Subflow, error)) (completed bool, next time.Time, lookErr error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for k, j := range w.pending {
		if now.Before(j.from) {
			if next.IsZero() || j.from.Before(next) {
				next = j.from
			}
			continue
		}
		sf, err := look(j.sf)
		if err != nil && !errors.Is(err, observe.ErrNoSocket) {
			lookErr = err
		}
		switch {
		case errors.Is(err, observe.ErrNoSocket):
			delete(w.pending, k)
			continue
		case err == nil && !sf.JoinIncomplete():
			delete(w.pending, k)
			completed = true
			continue
		case !now.Before(j.until):
			delete(w.pending, k) // the loop's recheck goes on looking
			continue
		}
		if at := now.Add(joinPoll); next.IsZero() || at.Before(next) {
			next = at
		}
	}
	return completed, next, lookErr
}

// watchJoins runs the watch until ctx ends: it looks when the next
// subflow is due and asks the sampler for a sample as soon as a join has
// completed. Its lookups go through a sock_diag socket of their own, so
// that none waits behind a sample's dump.
func (d *Daemon) watchJoins(ctx context.Context) {
	w := d.joins
	s := d.sampler
	if own, err := observe.NewSampler(0); err != nil {
		d.log.Printf("join watch: a sock_diag socket of its own: %v (it shares the sampler's)", err)
	} else {
		defer own.Close()
		s = own
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	said := ""
	for {
		completed, next, err := w.step(time.Now(), s.Lookup)
		if completed {
			d.in.sampleNow()
		}
		if err != nil && err.Error() != said {
			said = err.Error() // once each: it would repeat every millisecond
			d.log.Printf("join watch: %v (the regular rechecks go on)", err)
		}
		var wake <-chan time.Time
		if !next.IsZero() {
			timer.Reset(time.Until(next))
			wake = timer.C
		}
		select {
		case <-ctx.Done():
			return
		case <-w.kick:
		case <-wake:
		}
	}
}
