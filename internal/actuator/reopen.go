package actuator

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// Reopen under the kernel path manager (policy.Reopen: prefer's fast
// return). The kernel path manager opens subflows only from its endpoints
// and never opens one again by itself; what it does (net/mptcp/pm_kernel.c):
//
//   - removing an endpoint closes, on every connection it runs, the
//     subflows whose local address id is the endpoint's, and sends the
//     peer a REMOVE_ADDR for it (when a subflow from the address was
//     there): the peer closes its side, which frees the join it counted;
//   - adding an endpoint with the subflow flag makes it open, on every
//     fully established connection it runs, a subflow from that address
//     to the connection's peer address, where the limits allow;
//   - an endpoint of a connection's own address (id 0 on the wire) is
//     treated the same: removing it closes the connection's initial
//     subflow, and re-adding it with the subflow flag opens a join from
//     that address with id 0.
//
// So an endpoint is re-added (removed and added again, with its id, flags
// and interface) only when every connection with an established subflow
// from its address asks for it: one that does not would lose a subflow it
// uses. It is re-added without the backup flag, so that the fresh subflow
// carries data as soon as its join completes, and at most once per the
// interval the policies ask.

// reopenState is an address whose endpoint the policies want re-added.
type reopenState struct {
	since, last time.Time
	// asked: the last round with a wish for it.
	asked    time.Time
	interval time.Duration
	count    int
	who      string
	// note: why it was not re-added the last time it was due (said once
	// until it changes).
	note string
	// pending: the endpoint is removed and is to be added again at
	// pending.at (removeAddrTravel).
	pending *pendingAdd
	// pathRTT: the largest minimum RTT the subflows from the address
	// showed (its subflows stall and close; this stays).
	pathRTT time.Duration
	// gone: the last thing done was closing the subflows of the address
	// while no interface had it (closeGone): the re-add on its return is
	// due at once.
	gone bool
}

// pendingAdd is the second half of a re-add: the endpoint to add, and what
// it was (put back should the add fail).
type pendingAdd struct {
	at          time.Time
	was, fresh  pm.Endpoint
	owned       bool
	who, reason string
	// onReturn: removed while no interface had the address (closeGone);
	// added once one has it again, whoever asks, instead of at at.
	onReturn bool
}

// joinsAllowed: how many joins the kernel path manager lets one
// connection have (its subflows limit); read at every re-add.
func (a *endpointFlags) joinsAllowed() (int, error) {
	l, err := a.c.Limits()
	if err != nil {
		return 0, err
	}
	return int(l.Subflows), nil
}

func (a *endpointFlags) Reopen(wants []policy.Action, est, joining []observe.Subflow, now time.Time) []api.ActionRecord {
	type want struct {
		tokens   map[uint32]bool
		interval time.Duration
		who, why string
		gone     bool
		own      bool
	}
	byAddr := map[netip.Addr]*want{}
	for _, w := range wants {
		if w.Kind != policy.Reopen {
			continue
		}
		addr := w.Subflow.Local.Addr().Unmap()
		x := byAddr[addr]
		if x == nil {
			x = &want{tokens: map[uint32]bool{}, interval: w.Interval, who: w.Policy, why: w.Reason}
			byAddr[addr] = x
		}
		x.tokens[w.Token] = true
		x.interval = min(x.interval, w.Interval)
		x.gone = x.gone || w.Gone // the address is the host's: gone for all
		x.own = x.own || w.Own
	}
	if a.reopening == nil {
		a.reopening = map[netip.Addr]*reopenState{}
	}
	// Endpoints removed by an earlier round are added back when due,
	// whether or not anyone still asks (what was removed comes back).
	acts := a.addPending(now)
	for addr, st := range a.reopening {
		// Answered: nobody asks any more. A round without the wish (a
		// policy that could not resolve its interfaces for a moment) does
		// not reset the pace: the state goes after two intervals.
		if byAddr[addr] == nil && st.pending == nil && now.Sub(st.asked) >= 2*st.interval {
			delete(a.reopening, addr)
		}
	}
	addrs := make([]netip.Addr, 0, len(byAddr))
	for addr := range byAddr {
		addrs = append(addrs, addr)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	for _, addr := range addrs {
		w := byAddr[addr]
		st := a.reopening[addr]
		if st == nil {
			st = &reopenState{since: now}
			a.reopening[addr] = st
		}
		st.who, st.interval, st.asked = w.who, w.interval, now
		if st.pending != nil || !st.last.IsZero() && now.Before(st.due()) && (w.gone || !st.gone) {
			continue
		}
		if w.gone {
			acts = append(acts, a.closeGone(addr, st, w.tokens, est, w.who, w.why, w.own, now)...)
			continue
		}
		if w.own {
			if acts2, done := a.addWhereNone(addr, st, w.tokens, est, joining, w.who, w.why, now); done {
				acts = append(acts, acts2...)
				continue
			}
		}
		why, ok := a.mayReopen(addr, w.tokens, est, joining)
		if !ok {
			if why != "" {
				st.last = now // looked at again at the pace, not every round
			}
			if why != "" {
				acts = append(acts, st.say(addr, w.who, why)...)
			}
			continue
		}
		st.note = ""
		key := "endpoint reopen " + addr.String()
		if !a.gate.Ready(key, now) {
			continue
		}
		reason := fmt.Sprintf("%s; re-add #%d for %d connection(s), %s since the first", w.why, st.count+1, len(w.tokens), now.Sub(st.since).Round(time.Millisecond))
		for _, sf := range est {
			if w.tokens[sf.Token] && sf.Local.Addr().Unmap() == addr {
				st.pathRTT = max(st.pathRTT, sf.MinRTT)
			}
		}
		wait, other := removeAddrTravel(addr, w.tokens, est, joining, st.pathRTT, w.own)
		p, rec, err := a.removeForReopen(addr)
		st.last, st.gone = now, false
		if err == nil {
			st.count++
			p.who, p.reason = w.who, reason
			if wait > 0 {
				p.at = now.Add(wait)
				st.pending = &p
				rec.Target += fmt.Sprintf(" (removed: added again in %s)", wait.Round(time.Millisecond))
				reason += fmt.Sprintf("; added again once its REMOVE_ADDR can have reached the peer over the other paths (their largest smoothed RTT, %s, less the path's round trip, %s): the fresh subflow's address id is 0, as the subflow's it replaces", other.Round(time.Millisecond), st.pathRTT.Round(time.Millisecond))
			} else {
				rec, err = a.addForReopen(addr, p)
			}
		}
		a.gate.Done(key, err, now)
		rec.Policy, rec.Reason = w.who, reason
		acts = append(acts, rec)
	}
	if len(acts) > 0 {
		if err := a.state.Save(); err != nil {
			acts = append(acts, record("state", a.state.Path(), err))
		}
	}
	return acts
}

// say reports why addr was not re-added (or its subflows not closed):
// once, until the reason changes.
func (st *reopenState) say(addr netip.Addr, who, why string) []api.ActionRecord {
	if why == st.note {
		return nil
	}
	st.note = why
	act := record(string(policy.Reopen), "endpoint "+addr.String(), nil)
	act.Result, act.Policy, act.Reason = string(policy.Unsupported), who, why
	return []api.ActionRecord{act}
}

// reopenSlack: a round this much before an address is due re-adds it
// (a timer's round comes a hair early or late; one a hair early must not
// put the re-add a whole round late, the probe's SYNs pausing meanwhile).
const reopenSlack = 5 * time.Millisecond

// due is when the address may be re-added again.
func (st *reopenState) due() time.Time {
	return st.last.Add(st.interval - min(reopenSlack, st.interval/8))
}

// ReopenDue is when the next address being re-added is due again (zero:
// none is): the daemon looks again then, between its samples.
func (a *endpointFlags) ReopenDue() time.Time {
	var first time.Time
	for _, st := range a.reopening {
		d := st.last.Add(st.interval)
		switch {
		case st.pending != nil && st.pending.onReturn:
			continue // the address's event, or the next sample, brings it
		case st.pending != nil:
			d = st.pending.at
		case st.last.IsZero():
			continue
		}
		if first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

// ReopenPending: an endpoint is removed and waits to be added again.
func (a *endpointFlags) ReopenPending() bool {
	for _, st := range a.reopening {
		if st.pending != nil {
			return true
		}
	}
	return false
}

func (a *subflowFlags) ReopenPending() bool { return false }

// removeAddrTravel is how long a re-add of addr waits between removing
// the endpoint and adding it again: zero, unless a subflow from addr of a
// connection asking has address id 0 (the connection's own address: its
// initial subflow, or a join from that address, which the kernel numbers
// 0 whatever the endpoint's id), or own says it is a connection's own
// address. A subflow the samples no longer show, closed by the peer or
// by the last re-add but still in the connection's list, makes the
// removal send the REMOVE_ADDR all the same: keyed on the subflows
// alone, each fresh subflow the peer closed that way had the next re-add
// send another, which closed the next (prefer-ifdown-rtt40.yaml).
// Removing the endpoint sends the peer a
// REMOVE_ADDR for id 0 over the other paths, behind their queues; the
// fresh subflow's join from addr carries id 0 too, and a join the peer
// had before the REMOVE_ADDR would be closed by it (the spare id that
// keeps other addresses apart cannot help there). The REMOVE_ADDR takes
// a one-way trip of the other path with its queue, at most its smoothed
// RTT (other: the largest of the connections' subflows on other
// addresses); the join is the peer's a SYN, a SYN/ACK and an ACK after
// the add, one and a half of the path's round trips (pathRTT, the
// minimum its subflows showed; 0 when none did). So the add waits the
// other path's smoothed RTT less the path's round trip, counted from the
// round that removes the endpoint: half a round trip of the path and the
// other path's way back to spare, less what the removal itself took.
func removeAddrTravel(addr netip.Addr, tokens map[uint32]bool, est, joining []observe.Subflow, pathRTT time.Duration, own bool) (wait, other time.Duration) {
	if !own && !anyFrom(addr, tokens, true, est, joining) {
		return 0, 0
	}
	for _, sf := range est {
		if tokens[sf.Token] && sf.Local.Addr().Unmap() != addr {
			other = max(other, sf.SRTT)
		}
	}
	return max(0, other-pathRTT), other
}

// anyFrom says whether a connection in tokens has a subflow from addr in
// the lists (idZero: one with address id 0).
func anyFrom(addr netip.Addr, tokens map[uint32]bool, idZero bool, lists ...[]observe.Subflow) bool {
	for _, sfs := range lists {
		for _, sf := range sfs {
			if tokens[sf.Token] && sf.Local.Addr().Unmap() == addr && (!idZero || sf.LocalID == 0) {
				return true
			}
		}
	}
	return false
}

// addPending adds back the endpoints removed by earlier rounds whose time
// has come (on exit Restore drops what is pending instead: the state
// file's record puts an endpoint back as it was).
func (a *endpointFlags) addPending(now time.Time) []api.ActionRecord {
	var acts []api.ActionRecord
	for addr, st := range a.reopening {
		p := st.pending
		if p == nil || !p.onReturn && now.Before(p.at.Add(-reopenSlack)) || p.onReturn && !a.scope.present(addr) {
			continue
		}
		st.pending = nil
		rec, err := a.addForReopen(addr, *p)
		if err == nil {
			st.last = now   // the probe's SYNs start now: the pace counts from here
			st.gone = false // an add on the address's return is its re-add
		}
		rec.Policy, rec.Reason = p.who, p.reason
		acts = append(acts, rec)
	}
	return acts
}

func (a *subflowFlags) ReopenDue() time.Time { return time.Time{} }

// closeGone closes the subflows from addr, an address no interface has
// any more (policy.Action.Gone), on the connections in tokens. The kernel
// path manager closes subflows only by address, on every connection, so
// only where no other connection has one. Those from a connection's own
// address (id 0 on the wire: its initial subflow, or a join from that
// address) go by the kernel's removal of id 0 by address, which leaves
// the address's endpoint as it is (or with the endpoint mpsteer owns for
// it); it sends the peer a REMOVE_ADDR for id 0, seconds before the
// address is back. Joins under their endpoint's id go by removing the
// endpoint until the address is back (closeGoneJoins). The re-add on the
// address's return is due at once.
func (a *endpointFlags) closeGone(addr netip.Addr, st *reopenState, tokens map[uint32]bool, est []observe.Subflow, who, why string, own bool, now time.Time) []api.ActionRecord {
	st.last = now // looked at again at the pace, not every round
	note := func(msg string) []api.ActionRecord { return st.say(addr, who, msg) }
	if msg := othersUsing(addr, tokens, est, "not closed"); msg != "" {
		return note(msg)
	}
	if !own && !anyFrom(addr, tokens, true, est) {
		return a.closeGoneJoins(addr, st, tokens, est, who, why, now) // reads the endpoints itself
	}
	if err := a.readEndpoints(true); err != nil {
		return note(fmt.Sprintf("not closed: %v", err))
	}
	key := "endpoint reopen " + addr.String()
	if !a.gate.Ready(key, now) {
		return nil
	}
	st.note = ""
	// The endpoint mpsteer owns for the address goes with them (removing
	// it closes them the same way): on the address's return a fresh one is
	// added (addWhereNone), with no removal whose REMOVE_ADDR would race
	// the fresh join. A subflow closed while its address is gone cannot
	// send its FIN and stays in the connection's list for a while; a
	// removal then would send the peer a REMOVE_ADDR for id 0 again.
	ep, exists := a.byAddr()[addr]
	id, owned := a.state.Owned(addr)
	var err error
	var rec api.ActionRecord
	if exists && owned && ep.ID == id {
		err = a.c.DelEndpoint(ep)
		rec = record(string(policy.Reopen), fmt.Sprintf("endpoint %s (removed: %s, owned by mpsteer; its subflows of id 0 closed)", addr, ep), err)
		if err == nil {
			a.remove(ep.ID)
			a.state.Forget(addr)
			delete(a.set, addr)
		}
	} else {
		err = a.c.DelEndpoint(pm.Endpoint{ID: 0, Addr: addr})
		rec = record(string(policy.Reopen), fmt.Sprintf("endpoint %s (its subflows of id 0 closed)", addr), err)
	}
	a.gate.Done(key, err, now)
	if err == nil {
		st.count++
		st.gone = true
	}
	rec.Policy, rec.Reason = who, why
	return []api.ActionRecord{rec}
}

// closeGoneJoins closes joins from addr, gone, that carry their endpoint's
// id: the kernel path manager closes them only by removing the endpoint
// (the peers get a REMOVE_ADDR for its id). The endpoint is added back
// once an interface has the address again (addPending), not before: one
// added while the address is gone leaves a failed join in the
// connections' lists, and the removal of the next re-add would send a
// REMOVE_ADDR for the id the fresh join then carries. What it was is in
// the state file meanwhile, as for any re-add.
func (a *endpointFlags) closeGoneJoins(addr netip.Addr, st *reopenState, tokens map[uint32]bool, est []observe.Subflow, who, why string, now time.Time) []api.ActionRecord {
	if msg, ok := a.mayRemove(addr, tokens, est, "not closed"); !ok {
		if msg == "" {
			return nil
		}
		return st.say(addr, who, msg)
	}
	key := "endpoint reopen " + addr.String()
	if !a.gate.Ready(key, now) {
		return nil
	}
	st.note = ""
	p, rec, err := a.removeForReopen(addr)
	a.gate.Done(key, err, now)
	if err == nil {
		p.onReturn, p.who, p.reason = true, who, why+"; added back once an interface has it again"
		st.pending = &p
		st.count++
		st.gone = true
		rec.Target += " (removed: added back once the address is)"
	}
	rec.Policy, rec.Reason = who, why
	return []api.ActionRecord{rec}
}

// othersUsing says which connections outside tokens have an established
// subflow from addr (an endpoint acts on every connection): verb is what
// is not done because of them.
func othersUsing(addr netip.Addr, tokens map[uint32]bool, est []observe.Subflow, verb string) string {
	var others []string
	for _, sf := range est {
		if sf.Local.Addr().Unmap() == addr && !tokens[sf.Token] {
			others = append(others, fmt.Sprintf("%08x", sf.Token))
		}
	}
	if len(others) == 0 {
		return ""
	}
	sort.Strings(others)
	return fmt.Sprintf("%s: connection(s) %s use a subflow from %s that no policy wants closed (the endpoint acts on every connection)", verb, strings.Join(slicesCompact(others), ", "), addr)
}

// addWhereNone opens a fresh subflow from addr, a connection's own
// address (policy.Action.Own), where it has no endpoint and no subflow of
// the connections asking is left on it (closeGone closed them while the
// address was gone; or the kernel did): it adds an endpoint of mpsteer's
// with the subflow flag, as a re-add of an owned endpoint would, and
// nothing is removed (a removal would send the peer a REMOVE_ADDR for id
// 0 to race the fresh join). done false: a re-add as usual (mayReopen
// says what is missing).
func (a *endpointFlags) addWhereNone(addr netip.Addr, st *reopenState, tokens map[uint32]bool, est, joining []observe.Subflow, who, why string, now time.Time) (acts []api.ActionRecord, done bool) {
	if anyFrom(addr, tokens, false, est, joining) {
		return nil, false
	}
	if err := a.readEndpoints(true); err != nil || !a.scope.managedFunc()(addr) {
		return nil, false
	}
	if _, exists := a.byAddr()[addr]; exists {
		return nil, false
	}
	st.last = now
	if msg, ok := a.joinRoom(addr, tokens, est, joining); !ok {
		return st.say(addr, who, msg), true
	}
	key := "endpoint reopen " + addr.String()
	if !a.gate.Ready(key, now) {
		return nil, true
	}
	created, err := a.c.AddEndpoint(pm.Endpoint{Addr: addr, Flags: pm.FlagSubflow})
	a.gate.Done(key, err, now)
	rec := record(string(policy.Reopen), fmt.Sprintf("endpoint %s (added: %s, owned by mpsteer)", addr, created), err)
	if err == nil {
		a.state.Own(addr, created.ID)
		a.update(created)
		a.set[addr] = created
		st.count++
		st.gone, st.note = false, ""
	}
	rec.Policy, rec.Reason = who, why+"; the connection's own address, with no endpoint and no subflow left: one of mpsteer's is added with the subflow flag"
	return []api.ActionRecord{rec}, true
}

// mayReopen says whether addr's endpoint may be re-added for the
// connections in tokens, and why not.
func (a *endpointFlags) mayReopen(addr netip.Addr, tokens map[uint32]bool, est, joining []observe.Subflow) (string, bool) {
	if msg, ok := a.mayRemove(addr, tokens, est, "not re-added"); !ok {
		return msg, false
	}
	return a.joinRoom(addr, tokens, est, joining)
}

// mayRemove says whether addr's endpoint may be removed (and added again)
// for the connections in tokens, and why not (verb: what is not done;
// no reason: a fresh subflow from it just connected, the next round
// judges).
func (a *endpointFlags) mayRemove(addr netip.Addr, tokens map[uint32]bool, est []observe.Subflow, verb string) (string, bool) {
	if msg := othersUsing(addr, tokens, est, verb); msg != "" {
		return msg, false
	}
	if a.read != nil {
		// A fresh subflow from it may have connected since the round's
		// sample (its SYN answered): re-adding now would close it.
		known := map[policy.SubflowID]bool{}
		for _, sf := range est {
			known[policy.ID(sf)] = true
		}
		now, err := a.read()
		if err != nil {
			return fmt.Sprintf("%s: the subflows could not be read: %v", verb, err), false
		}
		for _, sf := range now {
			if sf.State == observe.TCPEstablished && sf.Local.Addr().Unmap() == addr && !known[policy.ID(sf)] {
				return "", false // answered: the next round judges it
			}
		}
	}
	if err := a.readEndpoints(true); err != nil {
		return fmt.Sprintf("%s: %v", verb, err), false
	}
	ep, exists := a.byAddr()[addr]
	_, owned := a.state.Owned(addr)
	switch {
	case !exists:
		return fmt.Sprintf("%s: %s has no endpoint (the kernel path manager opens no subflow from it)", verb, addr), false
	case !a.scope.managedFunc()(addr):
		return verb + ": the config's endpoints section leaves this address to others", false
	case ep.Flags&pm.FlagSignal != 0 || ep.Port != 0:
		return fmt.Sprintf("%s: endpoint %s announces its address (signal): re-adding it would make the peers' path managers act", verb, ep), false
	case ep.Flags&pm.FlagSubflow == 0 && !owned:
		return fmt.Sprintf("%s: endpoint %s is not mpsteer's and has no subflow flag: re-added as it is it would open nothing", verb, ep), false
	}
	return "", true
}

// joinRoom says whether the limits leave each connection in tokens room
// for a fresh subflow from addr: the connection's joins from other
// addresses stay, its joins from this one close.
func (a *endpointFlags) joinRoom(addr netip.Addr, tokens map[uint32]bool, est, joining []observe.Subflow) (string, bool) {
	allowed, err := a.joinsAllowed()
	if err != nil {
		return fmt.Sprintf("not re-added: the path manager's limits could not be read: %v", err), false
	}
	joins := map[uint32]int{}
	for _, sfs := range [][]observe.Subflow{est, joining} {
		for _, sf := range sfs {
			if tokens[sf.Token] && sf.MPFlags&observe.FlagJoinLoc != 0 && sf.Local.Addr().Unmap() != addr {
				joins[sf.Token]++
			}
		}
	}
	for tok := range tokens {
		if joins[tok]+1 > allowed {
			return fmt.Sprintf("not re-added: connection %08x has %d join(s) from other addresses and the subflows limit is %d: the kernel would open no fresh subflow from %s for it (ip mptcp limits set subflows %d)", tok, joins[tok], allowed, addr, joins[tok]+1), false
		}
	}
	return "", true
}

func slicesCompact(s []string) []string {
	out := s[:0]
	for i, v := range s {
		if i == 0 || v != s[i-1] {
			out = append(out, v)
		}
	}
	return out
}

// removeForReopen removes addr's endpoint, the first half of a re-add,
// and says what addForReopen is to add: the endpoint with its id (or the
// spare one), port and interface, without the backup flag (with the
// subflow flag when mpsteer owns it). What it was is recorded first, so
// that a daemon that dies before the add has it put back by the next.
func (a *endpointFlags) removeForReopen(addr netip.Addr) (pendingAdd, api.ActionRecord, error) {
	ep := a.byAddr()[addr]
	id, owned := a.state.Owned(addr)
	owned = owned && id == ep.ID
	nf := ep.Flags &^ pm.FlagBackup
	if owned {
		nf |= pm.FlagSubflow
	}
	target := fmt.Sprintf("endpoint %s", addr)
	if !owned {
		orig := ep
		if ch, ok := a.state.Changed(addr); ok {
			orig.Flags = ch.Original
		}
		a.state.Reopening(addr, orig)
		if err := a.state.Save(); err != nil {
			return pendingAdd{}, record(string(policy.Reopen), target, fmt.Errorf("not re-added: what it was could not be kept first: %w", err)), err
		}
	}
	// The endpoint comes back under the other of two ids (its own and a
	// spare one the kernel picks): removing it sent the peer a
	// REMOVE_ADDR for the id it had, and on a path that queues that can
	// reach the peer after the fresh subflow's join did; with the same id
	// the peer would close the fresh subflow.
	ids := a.reopenIDs[addr]
	if ids[0] == 0 {
		ids[0] = ep.ID
		a.reopenIDs[addr] = ids
	}
	next := ids[0]
	if ep.ID == ids[0] {
		next = ids[1] // 0: the kernel picks one
	}
	if err := a.c.DelEndpoint(ep); err != nil {
		a.state.Reopened(addr)
		return pendingAdd{}, record(string(policy.Reopen), target, fmt.Errorf("remove %s: %w", ep, err)), err
	}
	a.remove(ep.ID)
	fresh := pm.Endpoint{ID: next, Addr: ep.Addr, Port: ep.Port, Flags: nf, IfIndex: ep.IfIndex}
	return pendingAdd{was: ep, fresh: fresh, owned: owned}, record(string(policy.Reopen), target, nil), nil
}

// addForReopen adds the endpoint removeForReopen removed, the second half
// of a re-add; if it cannot, it puts back what was there.
func (a *endpointFlags) addForReopen(addr netip.Addr, p pendingAdd) (api.ActionRecord, error) {
	target := fmt.Sprintf("endpoint %s", addr)
	ep, fresh := p.was, p.fresh
	ids := a.reopenIDs[addr]
	created, err := a.c.AddEndpoint(fresh)
	if err != nil && fresh.ID != 0 {
		// Its id taken meanwhile (another manager's endpoint): any other.
		fresh.ID = 0
		created, err = a.c.AddEndpoint(fresh)
	}
	if err == nil {
		if created.ID != ids[0] {
			ids[1] = created.ID
		}
		a.reopenIDs[addr] = ids
	}
	if err != nil {
		// Put it back as it was; if even that fails, the record in the
		// state file has the next daemon (or the restore on exit) try.
		back, err2 := a.c.AddEndpoint(ep)
		if err2 == nil {
			a.update(back)
			a.set[addr] = back
			a.state.Reopened(addr)
			return record(string(policy.Reopen), target, fmt.Errorf("add %s: %w (put back as it was)", fresh, err)), err
		}
		if p.owned {
			a.state.Forget(addr)
		}
		delete(a.set, addr)
		return record(string(policy.Reopen), target, fmt.Errorf("add %s: %w; putting back %s failed too: %v", fresh, err, ep, err2)), err
	}
	a.update(created)
	a.set[addr] = created
	if created.Flags != ep.Flags {
		a.state.SetFlags(addr, ep.Flags, created.Flags)
	}
	if p.owned {
		a.state.Own(addr, created.ID)
	}
	a.state.Reopened(addr)
	rec := record(string(policy.Reopen), fmt.Sprintf("%s (re-added: %s)", target, created), nil)
	return rec, nil
}

// reopenWants: addresses being re-added with no established subflow left
// (their subflows closed by the last re-add) are decided usable, so that
// the endpoint stays as re-added (not restored: no policy's backup
// decision is on it any more).
func (a *endpointFlags) reopenWants(want map[netip.Addr]bool, reason, who map[netip.Addr]string) {
	for addr, st := range a.reopening {
		if _, decided := want[addr]; decided {
			continue
		}
		want[addr] = false
		reason[addr] = "being re-added: a fresh subflow from it carries the data as soon as it joins"
		who[addr] = st.who
	}
}

func (a *subflowFlags) Reopen(wants []policy.Action, _, _ []observe.Subflow, _ time.Time) []api.ActionRecord {
	if len(wants) == 0 || a.reopenSaid {
		return nil
	}
	a.reopenSaid = true
	act := record(string(policy.Reopen), "endpoint "+wants[0].Subflow.Local.Addr().String(), nil)
	act.Result, act.Policy = string(policy.Unsupported), wants[0].Policy
	act.Reason = "flags are set per subflow (backup_via: subflow): endpoints are not re-added; under the userspace path manager prefer opens fresh subflows itself"
	return []api.ActionRecord{act}
}
