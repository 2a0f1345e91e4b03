package daemon

import (
	"time"

	"mpsteer/internal/policy"
)

// quietRefresh: an idle, unchanged connection is still decided this often
// (its policies' timers, e.g. prefer's probes, run at this grain for it).
const quietRefresh = time.Second

// quietConns keeps, per connection, what it looked like when the policies
// last decided on it. Rounds at the sample interval then decide only the
// connections that moved, carry data, or have not been decided for
// quietRefresh; a host with thousands of idle connections costs the
// daemon per round what its busy ones cost (docs/reliability.md, load).
type quietConns struct {
	last map[uint32]quietConn
	// dirty: since the last full plan, a connection came or went, or a
	// decision or a subflow's own flag changed; fullAt: when the plan was
	// last put together whole and handed to the actuators.
	dirty  bool
	fullAt time.Time
}

type quietConn struct {
	key     uint64
	decided time.Time
	// plan: the decisions on its subflows when it was last decided, and
	// a sum of them and of the subflows' own flags.
	backup, limits []policy.Action
	actKey         uint64
}

// split returns the round the policies decide: snap without its quiet
// connections (listed in Quiet). Connections are decided when new,
// changed, busy, touched by an outcome, or last decided quietRefresh ago.
func (q *quietConns) split(snap *policy.Snapshot) *policy.Snapshot {
	if q.last == nil {
		q.last = map[uint32]quietConn{}
	}
	touched := map[uint32]bool{}
	for _, o := range snap.Outcomes {
		touched[o.Action.Token] = true
	}
	round := *snap
	round.Conns = make([]*policy.Conn, 0, len(snap.Conns))
	round.Quiet = map[uint32]bool{}
	seen := make(map[uint32]bool, len(snap.Conns))
	for _, c := range snap.Conns {
		seen[c.Token] = true
		key, idle := fingerprint(c)
		prev, ok := q.last[c.Token]
		if ok && idle && prev.key == key && !touched[c.Token] && snap.Now.Sub(prev.decided) < quietRefresh {
			round.Quiet[c.Token] = true
			round.QuietSubflows += len(c.Subflows)
			continue
		}
		prev.key, prev.decided = key, snap.Now
		q.last[c.Token] = prev
		round.Conns = append(round.Conns, c)
	}
	for tok := range q.last {
		if !seen[tok] {
			delete(q.last, tok)
			q.dirty = true
		}
	}
	return &round
}

// keep records the decisions on the connections decided this round
// (fresh holds them) and reports whether the whole plan must be put
// together again and applied: something changed, or it was last done
// quietRefresh ago. When not, the last whole plan still stands: the
// decided connections were decided as before.
func (q *quietConns) keep(fresh *policy.Plan, round *policy.Snapshot) bool {
	for _, c := range round.Conns {
		qc, known := q.last[c.Token]
		qc.backup, qc.limits = qc.backup[:0], qc.limits[:0]
		h := newHash()
		for _, sf := range c.Subflows {
			id := policy.ID(sf)
			h.mix(sf.Cookie)
			h.mix(uint64(sf.MPFlags)) // backup bits, and a join completing
			if sf.BackupLocal {
				h.mix(1)
			}
			if a, ok := fresh.Backup[id]; ok {
				qc.backup = append(qc.backup, a)
				h.mix(2)
				if a.Backup {
					h.mix(3)
				}
			}
			if a, ok := fresh.Limits[id]; ok {
				qc.limits = append(qc.limits, a)
				h.mix(uint64(a.Rate) + 4)
			}
		}
		if !known || qc.actKey != h.sum() {
			q.dirty = true
		}
		qc.actKey = h.sum()
		q.last[c.Token] = qc
	}
	return q.dirty || round.Now.Sub(q.fullAt) >= quietRefresh
}

// merge puts the whole plan's decisions together in into (its maps
// emptied and reused): this round's and those last taken on the quiet
// connections; the actuators see every subflow decided. (The round's
// other actions are fresh's own.)
func (q *quietConns) merge(into *policy.Plan, fresh *policy.Plan, round *policy.Snapshot) {
	if into.Backup == nil {
		into.Backup = make(map[policy.SubflowID]policy.Action, len(fresh.Backup)+round.QuietSubflows)
	}
	if into.Limits == nil {
		into.Limits = map[policy.SubflowID]policy.Action{}
	}
	clear(into.Backup)
	clear(into.Limits)
	for id, a := range fresh.Backup {
		into.Backup[id] = a
	}
	for id, a := range fresh.Limits {
		into.Limits[id] = a
	}
	for tok := range round.Quiet {
		qc := q.last[tok]
		for _, a := range qc.backup {
			into.Backup[a.Subflow] = a
		}
		for _, a := range qc.limits {
			into.Limits[a.Subflow] = a
		}
	}
	q.dirty, q.fullAt = false, round.Now
}

// forget drops what is kept, so the next round decides every connection
// (a reload, a hint: the policies changed).
func (q *quietConns) forget() { q.last, q.dirty = nil, true }

// hash is FNV-1a over 64-bit words.
type hash uint64

func newHash() hash { return 14695981039346656037 }

func (h *hash) mix(v uint64) { *h = (*h ^ hash(v)) * 1099511628211 }

func (h hash) sum() uint64 { return uint64(h) }

// fingerprint sums up what the policies decide a connection on, and says
// whether it is idle: nothing in flight, queued or being retransmitted on
// any subflow, none joining, none closed lately. Ages (time since the
// last ACK or data) are left out: an idle subflow's grow without meaning.
func fingerprint(c *policy.Conn) (uint64, bool) {
	idle := len(c.Pending) == 0 && len(c.Closed) == 0
	sum := newHash()
	mix := sum.mix
	mix(uint64(len(c.Subflows)))
	mix(c.BytesAcked)
	mix(c.BytesRecv)
	mix(uint64(len(c.Health)))
	if c.Established {
		mix(1)
	}
	for i := range c.Subflows {
		sf := &c.Subflows[i]
		if sf.Unacked != 0 || sf.NotSent != 0 || sf.Backoff != 0 || sf.CAState != 0 {
			idle = false
		}
		mix(sf.Cookie)
		mix(sf.BytesAcked)
		mix(sf.BytesRecv)
		mix(sf.BytesSent)
		mix(uint64(sf.TotalRetrans))
		mix(uint64(sf.MPFlags)<<8 | uint64(sf.State))
		mix(uint64(sf.SRTT))
	}
	for _, h := range c.Health {
		mix(uint64(h.Reports))
	}
	return sum.sum(), idle
}
