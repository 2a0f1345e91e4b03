package linkemu

import "time"

// RecentBucket is the resolution of Recent, and RecentSpan the longest
// window it can count over.
const (
	RecentBucket = 10 * time.Millisecond
	recentN      = 200
	RecentSpan   = recentN * RecentBucket
)

// RecentCounts is what one direction did with the packets that reached it
// over a recent window: what the lab publishes as a last hop's observed
// health (the counts, never the configured parameters).
type RecentCounts struct {
	WindowNs   time.Duration `json:"window_ns"`
	Delivered  uint64        `json:"delivered"`
	DropLoss   uint64        `json:"drop_loss"`
	DropOutage uint64        `json:"drop_outage"`
	DropQueue  uint64        `json:"drop_queue"`
}

type recentBucket struct {
	epoch int64
	c     RecentCounts
}

// recent keeps per-bucket counts over RecentSpan, in a ring.
type recent struct {
	b [recentN]recentBucket
}

func (r *recent) add(now time.Duration, v Verdict) {
	e := int64(now / RecentBucket)
	b := &r.b[e%recentN]
	if b.epoch != e {
		*b = recentBucket{epoch: e}
	}
	switch v {
	case Deliver:
		b.c.Delivered++
	case DropLoss:
		b.c.DropLoss++
	case DropOutage:
		b.c.DropOutage++
	case DropQueue:
		b.c.DropQueue++
	}
}

// sum counts the window that ends at now (at least one bucket, at most
// RecentSpan).
func (r *recent) sum(now, window time.Duration) RecentCounts {
	k := int64((window + RecentBucket - 1) / RecentBucket)
	k = max(1, min(k, recentN))
	e := int64(now / RecentBucket)
	out := RecentCounts{WindowNs: time.Duration(k) * RecentBucket}
	for i := int64(0); i < k; i++ {
		b := &r.b[(e-i)%recentN]
		if e-i < 0 || b.epoch != e-i {
			continue
		}
		out.Delivered += b.c.Delivered
		out.DropLoss += b.c.DropLoss
		out.DropOutage += b.c.DropOutage
		out.DropQueue += b.c.DropQueue
	}
	return out
}

// Recent counts what the direction did over the window ending now.
func (d *Direction) Recent(now, window time.Duration) RecentCounts {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.recent.sum(now, window)
}
