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
	}
	if a.reopening == nil {
		a.reopening = map[netip.Addr]*reopenState{}
	}
	for addr, st := range a.reopening {
		// Answered: nobody asks any more. A round without the wish (a
		// policy that could not resolve its interfaces for a moment) does
		// not reset the pace: the state goes after two intervals.
		if byAddr[addr] == nil && now.Sub(st.asked) >= 2*st.interval {
			delete(a.reopening, addr)
		}
	}
	addrs := make([]netip.Addr, 0, len(byAddr))
	for addr := range byAddr {
		addrs = append(addrs, addr)
	}
	sort.Slice(addrs, func(i, j int) bool { return addrs[i].Less(addrs[j]) })
	var acts []api.ActionRecord
	for _, addr := range addrs {
		w := byAddr[addr]
		st := a.reopening[addr]
		if st == nil {
			st = &reopenState{since: now}
			a.reopening[addr] = st
		}
		st.who, st.interval, st.asked = w.who, w.interval, now
		if !st.last.IsZero() && now.Before(st.due()) {
			continue
		}
		why, ok := a.mayReopen(addr, w.tokens, est, joining)
		if !ok {
			if why != "" {
				st.last = now // looked at again at the pace, not every round
			}
			if why != "" && why != st.note {
				st.note = why
				act := record(string(policy.Reopen), "endpoint "+addr.String(), nil)
				act.Result, act.Policy, act.Reason = string(policy.Unsupported), w.who, why
				acts = append(acts, act)
			}
			continue
		}
		st.note = ""
		key := "endpoint reopen " + addr.String()
		if !a.gate.Ready(key, now) {
			continue
		}
		rec, err := a.reopenEndpoint(addr)
		a.gate.Done(key, err, now)
		st.last = now
		if err == nil {
			st.count++
		}
		rec.Policy = w.who
		rec.Reason = fmt.Sprintf("%s; re-add #%d for %d connection(s), %s since the first", w.why, st.count, len(w.tokens), now.Sub(st.since).Round(time.Millisecond))
		acts = append(acts, rec)
	}
	if len(acts) > 0 {
		if err := a.state.Save(); err != nil {
			acts = append(acts, record("state", a.state.Path(), err))
		}
	}
	return acts
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
		if st.last.IsZero() {
			continue
		}
		if d := st.last.Add(st.interval); first.IsZero() || d.Before(first) {
			first = d
		}
	}
	return first
}

func (a *subflowFlags) ReopenDue() time.Time { return time.Time{} }

// mayReopen says whether addr's endpoint may be re-added for the
// connections in tokens, and why not.
func (a *endpointFlags) mayReopen(addr netip.Addr, tokens map[uint32]bool, est, joining []observe.Subflow) (string, bool) {
	var others []string
	for _, sf := range est {
		if sf.Local.Addr().Unmap() == addr && !tokens[sf.Token] {
			others = append(others, fmt.Sprintf("%08x", sf.Token))
		}
	}
	if len(others) > 0 {
		sort.Strings(others)
		return fmt.Sprintf("not re-added: connection(s) %s use a subflow from %s that no policy wants closed (the endpoint acts on every connection)", strings.Join(slicesCompact(others), ", "), addr), false
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
			return fmt.Sprintf("not re-added: the subflows could not be read: %v", err), false
		}
		for _, sf := range now {
			if sf.State == observe.TCPEstablished && sf.Local.Addr().Unmap() == addr && !known[policy.ID(sf)] {
				return "", false // answered: the next round judges it
			}
		}
	}
	if err := a.readEndpoints(true); err != nil {
		return fmt.Sprintf("not re-added: %v", err), false
	}
	ep, exists := a.byAddr()[addr]
	_, owned := a.state.Owned(addr)
	switch {
	case !exists:
		return fmt.Sprintf("not re-added: %s has no endpoint (the kernel path manager opens no subflow from it)", addr), false
	case !a.scope.managedFunc()(addr):
		return "not re-added: the config's endpoints section leaves this address to others", false
	case ep.Flags&pm.FlagSignal != 0 || ep.Port != 0:
		return fmt.Sprintf("not re-added: endpoint %s announces its address (signal): re-adding it would make the peers' path managers act", ep), false
	case ep.Flags&pm.FlagSubflow == 0 && !owned:
		return fmt.Sprintf("not re-added: endpoint %s is not mpsteer's and has no subflow flag: re-added as it is it would open nothing", ep), false
	}
	// A fresh subflow needs a join the limits allow: the connection's
	// joins from other addresses stay, its joins from this one close.
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

// reopenEndpoint removes addr's endpoint and adds it again with its id,
// port and interface, without the backup flag (with the subflow flag when
// mpsteer owns it). What it was is recorded first, so that a daemon that
// dies in between has it put back by the next.
func (a *endpointFlags) reopenEndpoint(addr netip.Addr) (api.ActionRecord, error) {
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
			return record(string(policy.Reopen), target, fmt.Errorf("not re-added: what it was could not be kept first: %w", err)), err
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
	}
	next := ids[0]
	if ep.ID == ids[0] {
		next = ids[1] // 0: the kernel picks one
	}
	if err := a.c.DelEndpoint(ep); err != nil {
		a.state.Reopened(addr)
		return record(string(policy.Reopen), target, fmt.Errorf("remove %s: %w", ep, err)), err
	}
	a.remove(ep.ID)
	fresh := pm.Endpoint{ID: next, Addr: ep.Addr, Port: ep.Port, Flags: nf, IfIndex: ep.IfIndex}
	created, err := a.c.AddEndpoint(fresh)
	if err != nil && next != 0 {
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
		if owned {
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
	if owned {
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
