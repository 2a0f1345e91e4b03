package actuator

import (
	"time"
)

// Gate keeps the daemon from asking the kernel again, every round, for a
// change it refused: the same change waits a backoff (1 s, doubling up to
// a minute) before it is tried again. A change that succeeds, or that no
// round asks about any more, is forgotten. Every actuator of an Applier
// goes through the one gate; keys name the actuator and the change.
type Gate struct {
	m map[string]*gateEntry
}

type gateEntry struct {
	fails int
	next  time.Time
	seen  bool // asked for since the last sweep
}

const (
	gateFirst = time.Second
	gateMax   = time.Minute
)

// Ready reports whether the change key may be tried at now.
func (g *Gate) Ready(key string, now time.Time) bool {
	e := g.m[key]
	if e != nil {
		e.seen = true
	}
	return e == nil || !now.Before(e.next)
}

// Done records how trying key went.
func (g *Gate) Done(key string, err error, now time.Time) {
	if err == nil {
		delete(g.m, key)
		return
	}
	if g.m == nil {
		g.m = map[string]*gateEntry{}
	}
	e := g.m[key]
	if e == nil {
		e = &gateEntry{}
		g.m[key] = e
	}
	e.fails++
	e.seen = true
	e.next = now.Add(min(gateFirst<<min(e.fails-1, 10), gateMax))
}

// Held is how many changes wait out a backoff.
func (g *Gate) Held() int { return len(g.m) }

// sweep forgets the changes no round asked about since the last sweep
// (their subflows or addresses are gone).
func (g *Gate) sweep() {
	for k, e := range g.m {
		if !e.seen {
			delete(g.m, k)
			continue
		}
		e.seen = false
	}
}
