package policy

import (
	"time"

	"mpsteer/internal/stats"
)

// Values kept over sliding windows of time, for the policies that
// measure: the extreme of a window, a rate from cumulative counters, the
// median and mean of recent rates.

// extreme keeps the extreme of the values added over a sliding window of
// time (the one better ranks first: the largest, or the smallest): a
// monotonic deque, so adding and asking cost O(1) amortized. The newest
// value stays even when it is older than the window.
type extreme[T any] struct {
	at []time.Time
	v  []T
}

// push adds v, seen at at: the values it ranks with or above leave; of
// the rest at most limit stay (0: no limit), the oldest going first.
func (e *extreme[T]) push(at time.Time, v T, better func(a, b T) bool, limit int) {
	n := len(e.v)
	for n > 0 && !better(e.v[n-1], v) {
		n--
	}
	e.v, e.at = append(e.v[:n], v), append(e.at[:n], at)
	if limit > 0 && len(e.v) > limit {
		k := len(e.v) - limit
		e.v, e.at = append(e.v[:0], e.v[k:]...), append(e.at[:0], e.at[k:]...)
	}
}

// expire drops the values seen more than window before now (never the
// newest).
func (e *extreme[T]) expire(now time.Time, window time.Duration) {
	i := 0
	for i < len(e.at)-1 && now.Sub(e.at[i]) > window {
		i++
	}
	e.v, e.at = e.v[i:], e.at[i:]
}

// first is the window's extreme; ok is false when nothing was added.
func (e *extreme[T]) first() (v T, ok bool) {
	if len(e.v) == 0 {
		return v, false
	}
	return e.v[0], true
}

// peak keeps the largest value seen over a window of time.
type peak struct{ e extreme[float64] }

func greater(a, b float64) bool { return a > b }

// add adds v, seen now, and returns the window's largest.
func (p *peak) add(now time.Time, v float64, window time.Duration) float64 {
	p.e.push(now, v, greater, 0)
	p.e.expire(now, window)
	return p.e.v[0]
}

// get is the window's maximum; ok is false when nothing was seen.
func (p *peak) get() (float64, bool) { return p.e.first() }

// max is the window's maximum (0: nothing seen).
func (p *peak) max() float64 {
	v, _ := p.get()
	return v
}

type sample struct {
	at    time.Time
	bytes uint64
}

// rate keeps (time, cumulative bytes) samples over a window.
type rate struct{ s []sample }

func (r *rate) add(now time.Time, bytes uint64, window time.Duration) float64 {
	v, _ := r.over(now, bytes, window)
	return v
}

// over adds a sample and returns the rate over the window, and whether
// the samples span all of it (a young subflow's first rates cover less,
// and jump).
func (r *rate) over(now time.Time, bytes uint64, window time.Duration) (float64, bool) {
	r.s = append(r.s, sample{now, bytes})
	// Start from the latest sample at or beyond the window's start.
	i := 0
	for i < len(r.s)-1 && now.Sub(r.s[i+1].at) >= window {
		i++
	}
	r.s = r.s[i:]
	first := r.s[0]
	dt := now.Sub(first.at)
	if dt <= 0 || bytes < first.bytes {
		return 0, false
	}
	return float64(bytes-first.bytes) / dt.Seconds(), dt >= window
}

// recentRates keeps rates over a window of time, for their median.
type recentRates struct {
	at []time.Time
	v  []float64
}

func (r *recentRates) add(now time.Time, v float64, window time.Duration) {
	r.at, r.v = append(r.at, now), append(r.v, v)
	i := 0
	for i < len(r.at)-1 && now.Sub(r.at[i]) > window {
		i++
	}
	r.at, r.v = r.at[i:], r.v[i:]
}

// mean is the rates' mean (0: none).
func (r *recentRates) mean() float64 {
	if len(r.v) == 0 {
		return 0
	}
	var sum float64
	for _, v := range r.v {
		sum += v
	}
	return sum / float64(len(r.v))
}

// span is the time its values cover.
func (r *recentRates) span() time.Duration {
	if len(r.at) == 0 {
		return 0
	}
	return r.at[len(r.at)-1].Sub(r.at[0])
}

func (r *recentRates) median() float64 {
	if len(r.v) == 0 {
		return 0
	}
	return stats.Float64s(r.v, 0.5)[0]
}
