package daemon

import (
	"time"

	"mpsteer/internal/api"
)

// retryGate keeps the daemon from asking the kernel again, every round,
// for a change it refused: the same change waits a backoff (1 s, doubling
// up to a minute) before it is tried again. A change that succeeds, or
// that no decision wants any more, is forgotten.
type retryGate struct {
	m map[string]*gateEntry
}

type gateEntry struct {
	fails int
	next  time.Time
	seen  bool // asked for in the last full round
}

const (
	gateFirst = time.Second
	gateMax   = time.Minute
)

// ready reports whether the change key may be tried at now.
func (g *retryGate) ready(key string, now time.Time) bool {
	e := g.m[key]
	if e != nil {
		e.seen = true
	}
	return e == nil || !now.Before(e.next)
}

// done records how trying key went.
func (g *retryGate) done(key string, err error, now time.Time) {
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

// sweep forgets the changes no full round asked about since the last
// sweep (their subflows or addresses are gone).
func (g *retryGate) sweep() {
	for k, e := range g.m {
		if !e.seen {
			delete(g.m, k)
			continue
		}
		e.seen = false
	}
}

// logOnce reports whether an action record should be logged: a refusal is
// logged the first time, and again only when the kernel's reason changes
// or after the same change was applied in between; records that are not
// refusals are always logged. Status, metrics and the monitor see every
// record.
func (d *Daemon) logOnce(a api.ActionRecord) bool {
	key := a.Policy + "|" + a.Kind + "|" + a.Target
	if a.Result != "refused" {
		delete(d.refusedLogged, key)
		return true
	}
	if d.refusedLogged == nil || len(d.refusedLogged) > 4096 {
		d.refusedLogged = map[string]string{}
	}
	if d.refusedLogged[key] == a.Error {
		return false
	}
	d.refusedLogged[key] = a.Error
	return true
}
