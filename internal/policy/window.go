package policy

import "time"

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
