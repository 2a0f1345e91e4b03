// Package linkemu emulates one network link in user space, the way mahimahi
// does: this kernel has no netem, so packets read from a TUN device pass
// through loss, outage, rate (or trace) and delay stages and are written to
// the TUN device at the other end when they are due.
//
// Pipe is the pure part: given a packet's arrival time and size it decides
// whether the packet is dropped and, if not, when it is delivered. It keeps
// no clock of its own, so tests drive it with a fake one. The rate stage is
// computed, not timed: a FIFO server at rate R delivers packet i at
// max(arrival_i, departure_{i-1}) + size_i/R, and its backlog is the set of
// packets whose departure lies in the future.
package linkemu

import (
	"fmt"
	"math/rand/v2"
	"time"

	"mpsteer/internal/units"
)

// Outage is a schedule of link failures: down for For starting at At, and
// again every Every (0 = once). With Jitter, each outage lasts For and a
// part of Jitter drawn from Seed and the outage's number, the same for
// both directions of a link: the link then comes back anywhere in the
// cycle of what waits for it (a sender's retransmissions or probes), not
// at the same point of it in every run.
type Outage struct {
	At, For, Every time.Duration
	Jitter         time.Duration
	Seed           uint64
}

// length is how long the k-th outage (from 0) lasts.
func (o Outage) length(k int64) time.Duration {
	if o.Jitter <= 0 {
		return o.For
	}
	// splitmix64 of the seed and the outage's number: a uniform draw
	// that both directions of a link make alike.
	z := o.Seed + uint64(k+1)*0x9e3779b97f4a7c15
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	z ^= z >> 31
	return o.For + time.Duration(float64(z>>11)/float64(1<<53)*float64(o.Jitter))
}

// number is which outage (from 0) the schedule is in or last had at t
// (t at or after At).
func (o Outage) number(t time.Duration) int64 {
	if o.Every <= 0 {
		return 0
	}
	return int64((t - o.At) / o.Every)
}

// active reports whether the link is down at t (time since the schedule's
// origin).
func (o Outage) active(t time.Duration) bool {
	if t < o.At || o.For <= 0 {
		return false
	}
	k := o.number(t)
	return t-o.At-time.Duration(k)*o.Every < o.length(k)
}

// lastEnd is when the latest outage that ended at or before t ended; ok
// is false when none has.
func (o Outage) lastEnd(t time.Duration) (time.Duration, bool) {
	if o.For <= 0 || t < o.At {
		return 0, false
	}
	for k := o.number(t); k >= 0; k-- {
		if end := o.At + time.Duration(k)*o.Every + o.length(k); end <= t {
			return end, true
		}
		if o.Every <= 0 {
			break
		}
	}
	return 0, false
}

// Params configure one direction of a link.
type Params struct {
	Rate   units.Rate // 0 and no Trace = unlimited
	Trace  *Trace     // delivery opportunities; replaces Rate
	Delay  time.Duration
	Jitter time.Duration // delay varies uniformly in [Delay-Jitter, Delay+Jitter]
	Loss   units.Fraction
	// Drop-tail queue limit: bytes if QueueBytes > 0, else packets. Both
	// zero means the default of DefaultQueuePackets.
	QueueBytes   units.Size
	QueuePackets int
	Outages      []Outage
}

// DefaultQueuePackets matches Linux's default txqueuelen.
const DefaultQueuePackets = 1000

func (p Params) String() string {
	s := ""
	if p.Trace != nil {
		s += "trace " + p.Trace.Name
	} else if p.Rate > 0 {
		s += p.Rate.String()
	} else {
		s += "unlimited"
	}
	s += fmt.Sprintf(" delay %v", p.Delay)
	if p.Jitter > 0 {
		s += fmt.Sprintf("±%v", p.Jitter)
	}
	if p.Loss > 0 {
		s += " loss " + p.Loss.String()
	}
	if p.QueueBytes > 0 {
		s += " queue " + p.QueueBytes.String()
	} else if p.QueuePackets > 0 {
		s += fmt.Sprintf(" queue %dpkt", p.QueuePackets)
	}
	return s
}

// Verdict says what happened to a packet.
type Verdict int

const (
	Deliver Verdict = iota
	DropLoss
	DropOutage
	DropQueue
)

func (v Verdict) String() string {
	return [...]string{"deliver", "loss", "outage", "queue"}[v]
}

// Stats count packets through one direction.
type Stats struct {
	Packets    uint64 `json:"packets"`
	Bytes      uint64 `json:"bytes"`
	Delivered  uint64 `json:"delivered"`
	DropLoss   uint64 `json:"drop_loss"`
	DropOutage uint64 `json:"drop_outage"`
	DropQueue  uint64 `json:"drop_queue"`
}

type inflight struct {
	departure time.Duration
	size      int
}

// Pipe is one direction of an emulated link. It is not safe for concurrent
// use; the caller serialises Admit and the setters.
type Pipe struct {
	p      Params
	rng    *rand.Rand
	origin time.Duration // schedules (outage, trace) count from here
	down   bool          // set by hand, on top of the schedule

	queue         []inflight // not yet departed, in order
	backlog       int        // bytes in queue
	lastDeparture time.Duration
	lastDelivery  time.Duration

	// trace state: opportunity index (absolute, across repetitions) and
	// bytes left in it
	traceIdx  int64
	traceLeft int

	stats Stats

	// ups records every return of the link from an outage, and when the
	// first packet and the first TCP data crossed it afterwards.
	ups        []UpRecord
	manualUpAt time.Duration
}

// UpRecord is one link-up and what crossed the link after it.
type UpRecord struct {
	UpAt          time.Duration `json:"up_at_ns"`
	FirstPacketAt time.Duration `json:"first_packet_at_ns,omitempty"`
	FirstDataAt   time.Duration `json:"first_data_at_ns,omitempty"`
}

// NewPipe makes a pipe; seed makes loss and jitter reproducible.
func NewPipe(p Params, seed uint64) *Pipe {
	return &Pipe{p: p, rng: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), traceIdx: -1}
}

// Params returns the current parameters.
func (q *Pipe) Params() Params { return q.p }

// SetParams changes the link while traffic flows. Packets already accepted
// keep their delivery times; the queue is kept.
func (q *Pipe) SetParams(p Params) {
	if p.Trace != q.p.Trace {
		q.traceIdx = -1
	}
	q.p = p
}

// Origin is when the outage and trace schedules started.
func (q *Pipe) Origin() time.Duration { return q.origin }

// SetOrigin restarts the outage and trace schedules at t.
func (q *Pipe) SetOrigin(t time.Duration) {
	q.origin = t
	q.traceIdx = -1
}

// SetDown takes the link down (or up) by hand at now.
func (q *Pipe) SetDown(down bool, now time.Duration) {
	if q.down && !down {
		q.manualUpAt = now
	}
	q.down = down
}

// lastUp is the latest moment at or before now when the link came back
// up (from the outage schedule or by hand); ok is false if it never did.
func (q *Pipe) lastUp(now time.Duration) (time.Duration, bool) {
	best, ok := q.manualUpAt, q.manualUpAt > 0
	t := now - q.origin
	for _, o := range q.p.Outages {
		end, up := o.lastEnd(t)
		if !up {
			continue
		}
		if at := q.origin + end; !ok || at > best {
			best, ok = at, true
		}
	}
	return best, ok
}

// track opens a record for a link-up seen for the first time.
func (q *Pipe) track(now time.Duration) {
	up, ok := q.lastUp(now)
	if !ok || (len(q.ups) > 0 && q.ups[len(q.ups)-1].UpAt >= up) {
		return
	}
	q.ups = append(q.ups, UpRecord{UpAt: up})
}

// NoteData tells the pipe that the packet it just delivered at now carried
// TCP payload.
func (q *Pipe) NoteData(now time.Duration) {
	if n := len(q.ups); n > 0 && q.ups[n-1].FirstDataAt == 0 {
		q.ups[n-1].FirstDataAt = now
	}
}

// Ups returns the link-up records.
func (q *Pipe) Ups() []UpRecord { return append([]UpRecord(nil), q.ups...) }

// Down reports whether the link is down at now.
func (q *Pipe) Down(now time.Duration) bool {
	if q.down {
		return true
	}
	for _, o := range q.p.Outages {
		if o.active(now - q.origin) {
			return true
		}
	}
	return false
}

// Stats returns the counters.
func (q *Pipe) Stats() Stats { return q.stats }

// Backlog is the number of bytes and packets queued at now.
func (q *Pipe) Backlog(now time.Duration) (int, int) {
	q.expire(now)
	return q.backlog, len(q.queue)
}

func (q *Pipe) expire(now time.Duration) {
	i := 0
	for i < len(q.queue) && q.queue[i].departure <= now {
		q.backlog -= q.queue[i].size
		i++
	}
	if i > 0 {
		q.queue = append(q.queue[:0], q.queue[i:]...)
	}
}

func (q *Pipe) full(size int) bool {
	if q.p.QueueBytes > 0 {
		return q.backlog+size > int(q.p.QueueBytes)
	}
	limit := q.p.QueuePackets
	if limit <= 0 {
		limit = DefaultQueuePackets
	}
	return len(q.queue)+1 > limit
}

// Admit runs a packet of size bytes arriving at now through the stages in
// order: loss, outage, rate or trace (bounded queue), delay.
func (q *Pipe) Admit(now time.Duration, size int) (time.Duration, Verdict) {
	q.stats.Packets++
	q.stats.Bytes += uint64(size)
	if q.p.Loss > 0 && q.rng.Float64() < float64(q.p.Loss) {
		q.stats.DropLoss++
		return 0, DropLoss
	}
	if q.Down(now) {
		q.stats.DropOutage++
		return 0, DropOutage
	}
	q.track(now)
	if n := len(q.ups); n > 0 && q.ups[n-1].FirstPacketAt == 0 {
		q.ups[n-1].FirstPacketAt = now
	}
	departure := now
	limited := q.p.Trace != nil || q.p.Rate > 0
	if limited {
		q.expire(now)
		if q.full(size) {
			q.stats.DropQueue++
			return 0, DropQueue
		}
		if q.p.Trace != nil {
			departure = q.traceDeparture(now, size)
		} else {
			start := max(now, q.lastDeparture)
			departure = start + q.p.Rate.TransmitTime(size)
		}
		q.lastDeparture = departure
		q.queue = append(q.queue, inflight{departure, size})
		q.backlog += size
	}
	delivery := departure + q.p.Delay
	if q.p.Jitter > 0 {
		j := time.Duration((q.rng.Float64()*2 - 1) * float64(q.p.Jitter))
		delivery = max(departure, delivery+j)
	}
	// A link does not reorder: jitter stretches gaps, never swaps packets.
	delivery = max(delivery, q.lastDelivery)
	q.lastDelivery = delivery
	q.stats.Delivered++
	return delivery, Deliver
}

// traceDeparture spends size bytes of delivery opportunities (each worth
// TraceOpportunityBytes), starting with the first opportunity at or after
// now and after the previous packet, as mahimahi does: unused opportunities
// are lost, a packet larger than what is left continues in the next one.
func (q *Pipe) traceDeparture(now time.Duration, size int) time.Duration {
	tr := q.p.Trace
	rel := now - q.origin
	if q.traceIdx < 0 || tr.at(q.traceIdx) < rel {
		// The current opportunity has passed (what was left of it is lost):
		// continue with the first one at or after now.
		q.traceIdx = tr.firstAtOrAfter(rel)
		q.traceLeft = TraceOpportunityBytes
	}
	for {
		if q.traceLeft == 0 {
			q.traceIdx++
			q.traceLeft = TraceOpportunityBytes
		}
		if size <= q.traceLeft {
			q.traceLeft -= size
			return q.origin + tr.at(q.traceIdx)
		}
		size -= q.traceLeft
		q.traceLeft = 0
	}
}
