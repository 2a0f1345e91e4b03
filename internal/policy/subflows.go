package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/yamlcfg"
)

// This file holds what the path-manager policies (fullmesh, incremental)
// share: which local addresses they may use, and the bookkeeping of the
// subflows they open: what is under way, what failed, and when to try
// again.

// localAddr is a local address a policy may open subflows from.
type localAddr struct {
	Iface string
	Addr  netip.Addr
}

// ifaceFilter is an allow list and a deny list of interfaces (or
// addresses), the keys interfaces and exclude of the policies that open
// subflows. An empty allow list allows every interface.
type ifaceFilter struct {
	Allow []string `yaml:"interfaces"`
	Deny  []string `yaml:"exclude"`
}

// check says what is wrong with the lists as decoded from m: names must
// be interfaces of the host (when the host is known) and appear in one
// list only.
func (f ifaceFilter) check(m *yamlcfg.Map, env Env) {
	var known map[string][]netip.Addr
	if env.Interfaces != nil {
		known = env.Interfaces()
	}
	check := func(key string, list []string) {
		for _, n := range list {
			if err := checkTarget(n); err != nil {
				m.Errorf(key, "%v", err)
				continue
			}
			if _, isAddr := netip.ParseAddr(n); isAddr == nil || known == nil {
				continue
			}
			if _, ok := known[n]; !ok {
				var names []string
				for k := range known {
					names = append(names, k)
				}
				sort.Strings(names)
				m.Errorf(key, "%q is not an interface of this host (interfaces with an address: %s)", n, strings.Join(names, ", "))
			}
		}
	}
	check("interfaces", f.Allow)
	check("exclude", f.Deny)
	for _, a := range f.Allow {
		for _, d := range f.Deny {
			if a == d {
				m.Errorf("exclude", "%q is both allowed (interfaces) and excluded: pick one", a)
			}
		}
	}
}

// locals lists the local addresses the filter allows, in the allow list's
// order (else by interface name).
func (f ifaceFilter) locals(env Env) []localAddr {
	var all map[string][]netip.Addr
	if env.Interfaces != nil {
		all = env.Interfaces()
	}
	denied := func(iface string, a netip.Addr) bool {
		for _, d := range f.Deny {
			if d == iface || d == a.String() {
				return true
			}
		}
		return false
	}
	var out []localAddr
	add := func(iface string, addrs []netip.Addr) {
		for _, a := range addrs {
			if !denied(iface, a) {
				out = append(out, localAddr{iface, a})
			}
		}
	}
	if len(f.Allow) > 0 {
		for _, n := range f.Allow {
			if a, err := netip.ParseAddr(n); err == nil {
				add(ifaceOf(all, a), []netip.Addr{a})
			} else {
				add(n, all[n])
			}
		}
		return out
	}
	names := make([]string, 0, len(all))
	for n := range all {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		add(n, all[n])
	}
	return out
}

func ifaceOf(all map[string][]netip.Addr, a netip.Addr) string {
	for n, addrs := range all {
		for _, x := range addrs {
			if x == a {
				return n
			}
		}
	}
	return ""
}

// requireUserspacePM refuses a policy that opens or closes subflows in a
// namespace run by the kernel path manager, where it could not.
func requireUserspacePM(m *yamlcfg.Map, env Env, name string) {
	if env.PathManager == KernelPM {
		m.Errorf("name", "policy %s opens and closes subflows itself, which needs the userspace path manager: set %s in this network namespace first (the kernel path manager opens subflows only from its endpoints)", name, env.UserspacePMSetting())
	}
}

// remotes lists the peer's addresses a client may open subflows to: the
// connection's own remote address first, then those the peer announced
// (an announcement without a port means the connection's port).
func remotes(c *Conn) []netip.AddrPort {
	var out []netip.AddrPort
	seen := map[netip.AddrPort]bool{}
	add := func(a netip.AddrPort) {
		if a.IsValid() && !seen[a] {
			seen[a] = true
			out = append(out, a)
		}
	}
	add(c.Remote)
	ids := make([]int, 0, len(c.RemoteAddrs))
	for id := range c.RemoteAddrs {
		ids = append(ids, int(id))
	}
	sort.Ints(ids)
	for _, id := range ids {
		a := c.RemoteAddrs[uint8(id)]
		if a.Port() == 0 {
			a = netip.AddrPortFrom(a.Addr(), c.Remote.Port())
		}
		add(a)
	}
	return out
}

// pair is a local address and a remote address and port.
type pair struct {
	Local  netip.Addr
	Remote netip.AddrPort
}

func (p pair) String() string { return p.Local.String() + "→" + p.Remote.String() }

func pairOf(sf observe.Subflow) pair { return pair{sf.Local.Addr(), sf.Remote} }

// Opening bookkeeping: defaults.
const (
	defaultBackoff     = time.Second
	defaultMaxBackoff  = 30 * time.Second
	defaultJoinTimeout = 3 * time.Second
)

// opener keeps, per connection and address pair, the subflows a policy
// asked for that have not shown up yet, the failures in a row and when
// the next try may start. Failures double the wait, from Backoff up to
// MaxBackoff; a subflow that joins resets it.
type opener struct {
	Backoff    time.Duration `yaml:"backoff" above:"0s"`
	MaxBackoff time.Duration `yaml:"max_backoff"`
	// JoinTimeout: a subflow still joining after this long is given up
	// (closed) and counts as a failure.
	JoinTimeout time.Duration `yaml:"join_timeout" above:"0s"`
	conns       map[uint32]*openerConn
}

type openerConn struct {
	pairs   map[pair]*pairState
	closed  time.Time               // the newest closed subflow already counted
	pending map[SubflowID]time.Time // joining subflows, first seen
	seen    map[SubflowID]time.Time // subflows seen (joining or established), first seen
	known   map[SubflowID]time.Time // subflows seen established, first seen so
	proven  map[SubflowID]bool      // established subflows that stayed up a backoff
	// destroyed are subflows the policy closed as failures: their
	// closing is not counted again as a failure.
	destroyed map[SubflowID]bool
	// closing are subflows the policy asked to close, and when: not
	// asked again while the view still shows them (for a while).
	closing map[SubflowID]time.Time
	done    map[string]bool      // one-off actions already taken (announcements)
	retry   map[string]time.Time // one-off actions to try again from then
}

type pairState struct {
	inflight []time.Time // creations asked for, not yet seen
	fails    int
	next     time.Time
	have     int // subflows seen last round (established and joining)
	lastErr  string
	failedAt time.Time // the round of the last failure
}

func newOpener() opener {
	return opener{Backoff: defaultBackoff, MaxBackoff: defaultMaxBackoff, JoinTimeout: defaultJoinTimeout,
		conns: map[uint32]*openerConn{}}
}

// check says what is wrong with the backoffs as decoded from m (the
// bounds of each are its tags').
func (o *opener) check(m *yamlcfg.Map) {
	if o.MaxBackoff < o.Backoff && !m.Failed("backoff") {
		m.Errorf("max_backoff", "%v is below backoff %v", o.MaxBackoff, o.Backoff)
	}
}

func (o *opener) conn(tok uint32) *openerConn {
	c := o.conns[tok]
	if c == nil {
		c = &openerConn{pairs: map[pair]*pairState{}, pending: map[SubflowID]time.Time{}, seen: map[SubflowID]time.Time{}, known: map[SubflowID]time.Time{}, proven: map[SubflowID]bool{},
			destroyed: map[SubflowID]bool{}, closing: map[SubflowID]time.Time{}, done: map[string]bool{}, retry: map[string]time.Time{}}
		o.conns[tok] = c
	}
	return c
}

func (oc *openerConn) pair(p pair) *pairState {
	ps := oc.pairs[p]
	if ps == nil {
		ps = &pairState{}
		oc.pairs[p] = ps
	}
	return ps
}

func (o *opener) fail(ps *pairState, now time.Time, why string) {
	if ps.failedAt.Equal(now) {
		return // one failure per pair and round, however many subflows
	}
	ps.failedAt = now
	ps.fails++
	wait := o.Backoff << min(ps.fails-1, 20)
	ps.next = now.Add(min(wait, o.MaxBackoff))
	ps.lastErr = why
}

// observe brings the bookkeeping up to date with a snapshot of one
// connection and the outcomes of earlier actions. It returns the joining
// subflows to give up on (older than JoinTimeout).
func (o *opener) observe(now time.Time, c *Conn, outcomes []Outcome, policyName string) []Action {
	oc := o.conn(c.Token)
	count := map[pair]int{}
	present := map[SubflowID]bool{}
	for _, sf := range append(append([]observe.Subflow(nil), c.Subflows...), c.Pending...) {
		id := ID(sf)
		present[id] = true
		count[pairOf(sf)]++
		if _, ok := oc.seen[id]; !ok {
			// A subflow seen for the first time takes the place of a
			// creation under way on its pair.
			oc.seen[id] = now
			if ps := oc.pair(pairOf(sf)); len(ps.inflight) > 0 {
				ps.inflight = ps.inflight[1:]
			}
		}
	}
	for id := range oc.seen {
		if !present[id] {
			delete(oc.seen, id)
		}
	}
	for _, sf := range c.Subflows {
		id := ID(sf)
		at, ok := oc.known[id]
		if !ok {
			oc.known[id], at = now, now
		}
		// A join worked once its subflow has stayed up for a backoff: a
		// peer that resets every join right after the handshake (its
		// subflow limit reached) must not reset the backoff with each
		// try, or the pair is reopened hundreds of times a second.
		if !oc.proven[id] && now.Sub(at) >= o.Backoff {
			oc.proven[id] = true
			ps := oc.pair(pairOf(sf))
			ps.fails, ps.next, ps.lastErr = 0, time.Time{}, ""
		}
		delete(oc.pending, id)
	}
	for id := range oc.known {
		if !present[id] {
			delete(oc.known, id)
			delete(oc.proven, id)
		}
	}
	for id := range oc.closing {
		if !present[id] {
			delete(oc.closing, id)
		}
	}
	var giveUp []Action
	for _, sf := range c.Pending {
		id := ID(sf)
		first, ok := oc.pending[id]
		if !ok {
			oc.pending[id] = now
			continue
		}
		if now.Sub(first) > o.JoinTimeout {
			giveUp = append(giveUp, o.destroy(now, c, sf, fmt.Sprintf("still joining after %s (join_timeout %s)", fmtMs(now.Sub(first)), o.JoinTimeout))...)
			delete(oc.pending, id)
		}
	}
	for id := range oc.pending {
		if !present[id] {
			delete(oc.pending, id)
		}
	}
	for p, ps := range oc.pairs {
		ps.have = count[p]
		// A creation that never showed up failed (the kernel may refuse
		// a join only after the command returned).
		for len(ps.inflight) > 0 && now.Sub(ps.inflight[0]) > o.JoinTimeout {
			ps.inflight = ps.inflight[1:]
			o.fail(ps, now, "the subflow never appeared")
		}
	}
	for p, n := range count {
		oc.pair(p).have = n
	}
	// Creations the kernel refused: one failure per pair and round,
	// however many were refused together.
	failed := map[*pairState]string{}
	for _, out := range outcomes {
		a := out.Action
		if a.Token != c.Token || a.Policy != policyName {
			continue
		}
		switch {
		case a.Kind == Create && out.Result != Applied:
			ps := oc.pair(pair{a.Subflow.Local.Addr(), a.Subflow.Remote.AddrPort()})
			if len(ps.inflight) > 0 {
				ps.inflight = ps.inflight[1:]
			}
			failed[ps] = out.Error
		case (a.Kind == Announce || a.Kind == Withdraw) && out.Result != Applied:
			key := string(a.Kind) + " " + a.Addr.String()
			delete(oc.done, key)
			oc.retry[key] = now.Add(o.MaxBackoff)
		}
	}
	for ps, why := range failed {
		o.fail(ps, now, why)
	}
	// Subflows that closed since the last round: their pairs wait a
	// backoff before the subflow is opened again.
	for _, cl := range c.Closed {
		if !cl.At.After(oc.closed) {
			continue
		}
		oc.closed = cl.At
		if id := NewSubflowID(cl.Local, cl.Remote); oc.destroyed[id] {
			delete(oc.destroyed, id)
			continue // counted when it was closed
		}
		ps := oc.pair(pair{cl.Local.Addr(), cl.Remote})
		why := "subflow closed"
		if cl.Error != 0 {
			why = fmt.Sprintf("subflow closed with error %d", cl.Error)
		}
		o.fail(ps, now, why)
	}
	return giveUp
}

// closeTimeout: a subflow asked to close that the view still shows after
// this long is asked again.
const closeTimeout = 2 * time.Second

// close asks once to close a subflow (again only if it is still there
// after closeTimeout).
func (o *opener) close(now time.Time, tok uint32, id SubflowID, reason string) []Action {
	oc := o.conn(tok)
	if at, ok := oc.closing[id]; ok && now.Sub(at) < closeTimeout {
		return nil
	}
	oc.closing[id] = now
	return []Action{{Kind: Destroy, Token: tok, Subflow: id, Reason: reason}}
}

// age is how long the policy has seen a subflow (0: not seen before).
func (o *opener) age(now time.Time, tok uint32, id SubflowID) time.Duration {
	if at, ok := o.conn(tok).seen[id]; ok {
		return now.Sub(at)
	}
	return 0
}

// destroy closes a subflow that failed (a join that does not complete, a
// subflow that stalls); its pair waits a backoff before it is reopened.
func (o *opener) destroy(now time.Time, c *Conn, sf observe.Subflow, why string) []Action {
	oc := o.conn(c.Token)
	if at, ok := oc.closing[ID(sf)]; ok && now.Sub(at) < closeTimeout {
		return nil
	}
	ps := oc.pair(pairOf(sf))
	o.fail(ps, now, why)
	oc.destroyed[ID(sf)] = true
	return o.close(now, c.Token, ID(sf), fmt.Sprintf("%s: closed, reopened in %s", why, fmtMs(ps.next.Sub(now))))
}

// open asks for n more subflows on a pair if its backoff allows it now.
func (o *opener) open(now time.Time, c *Conn, p pair, n int, iface, reason string) []Action {
	oc := o.conn(c.Token)
	ps := oc.pair(p)
	if n <= 0 || now.Before(ps.next) {
		return nil
	}
	var out []Action
	for i := 0; i < n; i++ {
		ps.inflight = append(ps.inflight, now)
		out = append(out, Action{Kind: Create, Token: c.Token, Iface: iface,
			Subflow: NewSubflowID(netip.AddrPortFrom(p.Local, 0), p.Remote), Reason: reason})
	}
	return out
}

// fails is how many times in a row opening a subflow on the pair failed.
func (o *opener) fails(tok uint32, p pair) int { return o.conn(tok).pair(p).fails }

// ready: the pair's backoff allows a try now.
func (o *opener) ready(now time.Time, tok uint32, p pair) bool {
	return !now.Before(o.conn(tok).pair(p).next)
}

// underWay is what a pair has or will have: subflows seen and creations
// not yet seen.
func (o *opener) underWay(tok uint32, p pair) int {
	ps := o.conn(tok).pair(p)
	return ps.have + len(ps.inflight)
}

// once returns the action the first time key is asked for on the
// connection (and again after a failure, once its retry time has come).
func (o *opener) once(now time.Time, tok uint32, key string, a Action) []Action {
	oc := o.conn(tok)
	if oc.done[key] || now.Before(oc.retry[key]) {
		return nil
	}
	oc.done[key] = true
	return []Action{a}
}

// forget drops connections that are gone.
func (o *opener) forget(live map[uint32]bool) {
	for tok := range o.conns {
		if !live[tok] {
			delete(o.conns, tok)
		}
	}
}

// PairStatus is one address pair of a connection, as a path-manager
// policy sees it.
type PairStatus struct {
	Pair      string `json:"pair"`
	Want      int    `json:"want"`
	Have      int    `json:"have"`
	UnderWay  int    `json:"under_way"`
	Failures  int    `json:"failures_in_a_row"`
	RetryInMs int64  `json:"retry_in_ms,omitempty"`
	LastError string `json:"last_error,omitempty"`
}

func (o *opener) pairStatus(now time.Time, tok uint32, p pair, want int) PairStatus {
	ps := o.conn(tok).pair(p)
	st := PairStatus{Pair: p.String(), Want: want, Have: ps.have, UnderWay: len(ps.inflight), Failures: ps.fails, LastError: ps.lastErr}
	if ps.next.After(now) {
		st.RetryInMs = ps.next.Sub(now).Milliseconds()
	}
	return st
}
