package actuator

import (
	"fmt"
	"net/netip"
	"sort"

	"mpsteer/internal/api"
	"mpsteer/internal/crashstate"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// Scope says which local addresses' endpoints the daemon may change. By
// default any address a policy decides on; Manage, when not empty, keeps
// to those; Leave never. Entries are resolved by Resolve (interface names
// to their addresses) at every round.
type Scope struct {
	Manage, Leave []string
	Resolve       func(name string) ([]netip.Addr, bool)
	// Interfaces lists the namespace's interfaces that are up, with their
	// addresses (the daemon's view, the one its policies see); nil: not
	// known.
	Interfaces func() map[string][]netip.Addr
}

// present says whether an interface that is up has addr; true when the
// interfaces are not known (an add waiting for its address is made as
// before then).
func (s Scope) present(addr netip.Addr) bool {
	if s.Interfaces == nil {
		return true
	}
	for _, addrs := range s.Interfaces() {
		for _, a := range addrs {
			if a.Unmap() == addr {
				return true
			}
		}
	}
	return false
}

func (s Scope) set(names []string) map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	for _, n := range names {
		if a, err := netip.ParseAddr(n); err == nil {
			out[a.Unmap()] = true
			continue
		}
		if s.Resolve != nil {
			as, _ := s.Resolve(n)
			for _, a := range as {
				out[a.Unmap()] = true
			}
		}
	}
	return out
}

// managedFunc returns whether the daemon may change addr's endpoint.
func (s Scope) managedFunc() func(netip.Addr) bool {
	var manage map[netip.Addr]bool
	if len(s.Manage) > 0 {
		manage = s.set(s.Manage)
	}
	leave := s.set(s.Leave)
	return func(a netip.Addr) bool {
		return !leave[a] && (manage == nil || manage[a])
	}
}

// endpointFlags works with the in-kernel path manager, whose backup flag
// lives on endpoints (local addresses): per-subflow flags are refused
// unless the userspace path manager owns the connection.
//
// An address is made backup when every established subflow on it should
// be: one that should not, or one of a connection no policy decides on,
// keeps it usable (fail open: the flag acts on every connection from the
// address). Addresses that have no endpoint (the initial subflow's) get
// one the daemon owns. The daemon changes only endpoints it manages (a
// policy decides on their address, or wants new subflows to join as
// backup, and the config's endpoints section does not leave them to
// others); what others do to other endpoints is observed, never undone. If
// another manager changes a flag the daemon set, that is reported once and
// the daemon yields until its own decision for the address changes.
type endpointFlags struct {
	c     PM
	gate  *Gate
	state *crashstate.File
	scope Scope

	// eps is the kernel's endpoints as last read, with the daemon's own
	// changes since; nil until read.
	eps []pm.Endpoint
	// set is what the daemon set on each endpoint this run (its id and
	// flags): a read that shows other flags on the same endpoint is
	// another manager's change.
	set map[netip.Addr]pm.Endpoint
	// yielded: the backup value the daemon had set on an endpoint whose
	// flag another manager changed since; the daemon does not change the
	// address while its own decision is still that value and the endpoint
	// is still that one.
	yielded map[netip.Addr]yield
	// want and reasons are the last round's, for status.
	want    map[netip.Addr]bool
	reasons map[netip.Addr]string
	// unmanaged: addresses a policy decides on that the config leaves to
	// others, said once each.
	unmanaged map[netip.Addr]bool
	recheck   bool
	joining   []observe.Subflow // the last round's (Joining)
	// reopening: addresses whose endpoint the policies want re-added
	// (reopen.go); reopenIDs the two ids each is re-added under in turn,
	// its own and a spare one.
	reopening map[netip.Addr]*reopenState
	reopenIDs map[netip.Addr][2]uint8
	// read reads the namespace's subflows now (nil: only what the last
	// round saw, lastUsed): an endpoint mpsteer owns is removed only when
	// no subflow uses its address, since removing it closes them, the
	// initial subflows of connections from it included; and an endpoint
	// is not re-added while a fresh subflow from it has just connected.
	read     SubflowReader
	lastUsed map[netip.Addr]int
	// leftInUse: owned endpoints left in place because subflows use
	// them, said once each.
	leftInUse map[netip.Addr]bool
}

// SubflowReader reads the namespace's subflows (every state) now.
type SubflowReader func() ([]observe.Subflow, error)

// usage counts the subflows per local address.
func (r SubflowReader) usage() (map[netip.Addr]int, error) {
	sfs, err := r()
	if err != nil {
		return nil, err
	}
	out := map[netip.Addr]int{}
	for _, sf := range sfs {
		out[sf.Local.Addr().Unmap()]++
	}
	return out, nil
}

// NewEndpointFlags sets the flags of the kernel path manager's endpoints;
// state keeps what it changed on disk; read (may be nil) reads the
// subflows when an endpoint is to be removed or re-added.
func NewEndpointFlags(c PM, gate *Gate, state *crashstate.File, scope Scope, read SubflowReader) Flags {
	return &endpointFlags{c: c, gate: gate, state: state, scope: scope, set: map[netip.Addr]pm.Endpoint{},
		yielded: map[netip.Addr]yield{}, unmanaged: map[netip.Addr]bool{}, read: read, leftInUse: map[netip.Addr]bool{},
		reopenIDs: map[netip.Addr][2]uint8{}}
}

func (a *endpointFlags) Mode() string     { return "endpoint" }
func (a *endpointFlags) SetScope(s Scope) { a.scope = s }
func (a *endpointFlags) Recheck() bool    { return a.recheck }

func (a *endpointFlags) Joining() []observe.Subflow { return a.joining }

// readEndpoints lists the endpoints when asked to or never read.
func (a *endpointFlags) readEndpoints(refresh bool) error {
	if a.eps != nil && !refresh {
		return nil
	}
	eps, err := a.c.Endpoints()
	if err != nil {
		return err
	}
	a.eps = eps
	return nil
}

func (a *endpointFlags) byAddr() map[netip.Addr]pm.Endpoint {
	m := make(map[netip.Addr]pm.Endpoint, len(a.eps))
	for _, e := range a.eps {
		m[e.Addr.Unmap()] = e
	}
	return m
}

// update records an endpoint as the daemon just made it.
func (a *endpointFlags) update(e pm.Endpoint) {
	for i := range a.eps {
		if a.eps[i].ID == e.ID {
			a.eps[i] = e
			return
		}
	}
	a.eps = append(a.eps, e)
}

func (a *endpointFlags) remove(id uint8) {
	keep := a.eps[:0]
	for _, e := range a.eps {
		if e.ID != id {
			keep = append(keep, e)
		}
	}
	a.eps = keep
}

// yield is what the daemon yielded on: the backup value it had set, on
// the endpoint with this id.
type yield struct {
	backup bool
	id     uint8
}

// noticeOthers compares a fresh read with what the daemon set: an
// endpoint whose flags someone else changed is yielded (reported once); one
// removed or replaced by someone else is forgotten, and so is a yield on it
// (a new endpoint for the address is decided afresh).
func (a *endpointFlags) noticeOthers(byAddr map[netip.Addr]pm.Endpoint) []api.ActionRecord {
	var acts []api.ActionRecord
	for addr, y := range a.yielded {
		if ep, ok := byAddr[addr]; !ok || ep.ID != y.id {
			delete(a.yielded, addr)
		}
	}
	for addr, mine := range a.set {
		if st := a.reopening[addr]; st != nil && st.pending != nil {
			continue // removed by the daemon, to be added again (reopen.go)
		}
		ep, ok := byAddr[addr]
		switch {
		case !ok || ep.ID != mine.ID:
			// Removed, or replaced by a new endpoint (NetworkManager does
			// so when an interface comes back): nothing of the daemon's is
			// there any more.
			delete(a.set, addr)
			if id, owned := a.state.Owned(addr); !owned || !ok || id != ep.ID {
				a.state.Forget(addr)
			}
		case ep.Flags != mine.Flags:
			delete(a.set, addr)
			a.state.Forget(addr)
			if _, owned := a.state.Owned(addr); owned {
				a.state.Own(addr, ep.ID) // still the daemon's to remove
			}
			backup := ep.Flags&pm.FlagBackup != 0
			if (mine.Flags&pm.FlagBackup != 0) == backup {
				continue // another flag than backup changed: not ours to judge
			}
			a.yielded[addr] = yield{backup: !backup, id: ep.ID} // what the daemon had set, and yields on
			act := backupRecord("endpoint "+addr.String(), 0, mine.Flags&pm.FlagBackup != 0, nil)
			act.Result = Yielded
			act.Reason = fmt.Sprintf("another manager changed the endpoint's flags to %q after mpsteer set %q: mpsteer leaves them until its own decision for %s changes", ep.Flags, mine.Flags, addr)
			acts = append(acts, act)
		}
	}
	return acts
}

func (a *endpointFlags) Apply(dec map[policy.SubflowID]policy.Action, est []observe.Subflow, r Round) []api.ActionRecord {
	var acts []api.ActionRecord
	if err := a.readEndpoints(r.Refresh); err != nil {
		if a.eps == nil {
			return []api.ActionRecord{record("endpoint", "list endpoints", err)}
		}
		acts = append(acts, record("endpoint", "list endpoints", err)) // the last read stands
	}
	byAddr := a.byAddr()
	if r.Refresh {
		acts = append(acts, a.noticeOthers(byAddr)...)
	}
	want, reason, who, stale, stillJoining := wantPerAddress(dec, est)
	a.reopenWants(want, reason, who) // reopen.go
	a.lastUsed = map[netip.Addr]int{}
	for i := range est {
		a.lastUsed[est[i].Local.Addr().Unmap()]++
	}
	a.recheck, a.joining = len(stillJoining) > 0, stillJoining
	a.want, a.reasons = want, reason
	managed := a.scope.managedFunc()
	for addr := range want {
		if !managed(addr) {
			if !a.unmanaged[addr] {
				a.unmanaged[addr] = true
				act := backupRecord("endpoint "+addr.String(), 0, want[addr], nil)
				act.Result, act.Policy = string(policy.Unsupported), who[addr]
				act.Reason = "the config's endpoints section leaves this address to others: mpsteer does not change its endpoint"
				acts = append(acts, act)
			}
			delete(want, addr)
		}
	}
	for addr, backup := range want {
		if y, ok := a.yielded[addr]; ok {
			if y.backup == backup {
				continue // still the decision the daemon yielded on
			}
			delete(a.yielded, addr) // the decision changed since: a new one
		}
		ep, exists := byAddr[addr]
		if !exists {
			if !backup {
				continue // no endpoint means no backup flag: nothing to do
			}
			key := "endpoint add " + addr.String()
			if !a.gate.Ready(key, r.Now) {
				continue
			}
			created, err := a.c.AddEndpoint(pm.Endpoint{Addr: addr})
			a.gate.Done(key, err, r.Now)
			act := record("endpoint", fmt.Sprintf("add %s (owned by mpsteer)", addr), err)
			act.Reason = "the flag lives on an endpoint; this address has none"
			acts = append(acts, act)
			if err != nil {
				continue
			}
			a.state.Own(addr, created.ID)
			a.update(created)
			ep = created
		}
		nf := ep.Flags &^ pm.FlagBackup
		if backup {
			nf |= pm.FlagBackup
		}
		target := "endpoint " + addr.String()
		why := reason[addr]
		key := fmt.Sprintf("endpoint flags %s %v", addr, backup)
		if !a.gate.Ready(key, r.Now) {
			continue // refused before: not again until its backoff is over
		}
		if nf == ep.Flags {
			// The endpoint says so, but a subflow may have missed the
			// MP_PRIO (one that was still joining when the flag changed):
			// flip the flag off and on to send it again.
			if !r.Refresh || !stale[addr] {
				continue
			}
			if err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf ^ pm.FlagBackup}); err != nil {
				acts = append(acts, backupRecord(target+" (resend)", 0, backup, err))
				a.gate.Done(key, err, r.Now)
				continue
			}
			why += " (resent: a subflow had missed it)"
		}
		err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf})
		a.gate.Done(key, err, r.Now)
		if err == nil {
			a.state.SetFlags(addr, ep.Flags, nf)
			ep.Flags = nf
			a.update(ep)
			a.set[addr] = ep
		}
		a.recheck = a.recheck || !backup && err == nil
		act := backupRecord(target, 0, backup, err)
		act.Policy, act.Reason = who[addr], why
		acts = append(acts, act)
	}
	// Endpoints with no decision on their address yet: backup where a
	// policy keeps the address backup on every connection, and, while a
	// policy wants every join as backup, those that open subflows (an
	// MP_JOIN from a backup endpoint carries the B bit: the subflow
	// carries nothing until a decision makes its address usable).
	joining := map[netip.Addr]bool{}
	if r.Joins.Backup || len(r.Joins.BackupAddrs) > 0 {
		for _, e := range a.eps {
			addr := e.Addr.Unmap()
			if _, decided := want[addr]; decided || !managed(addr) {
				continue
			}
			why, who := "new subflows join as backup until a policy lets them carry", ""
			if p, ok := r.Joins.BackupAddrs[addr]; ok {
				why, who = "every subflow from this address is backup: new ones join as backup", p
			} else if _, owned := a.state.Owned(addr); owned || !r.Joins.Backup || e.Flags&pm.FlagSubflow == 0 {
				continue
			}
			joining[addr] = true
			if y, ok := a.yielded[addr]; ok && y.backup {
				continue // yielded on backup already
			}
			key := fmt.Sprintf("endpoint flags %s %v", addr, true)
			if e.Flags&pm.FlagBackup != 0 || !a.gate.Ready(key, r.Now) {
				continue
			}
			nf := e.Flags | pm.FlagBackup
			err := a.c.SetEndpointFlags(pm.Endpoint{ID: e.ID, Addr: addr, Flags: nf})
			a.gate.Done(key, err, r.Now)
			if err == nil {
				a.state.SetFlags(addr, e.Flags, nf)
				e.Flags = nf
				a.update(e)
				a.set[addr] = e
			}
			act := backupRecord("endpoint "+addr.String(), 0, true, err)
			act.Policy, act.Reason = who, why
			acts = append(acts, act)
		}
	}
	// Addresses nobody decides on any more go back to how they were.
	for _, addr := range a.state.Addrs() {
		if _, decided := want[addr]; !decided && !joining[addr] {
			acts = append(acts, a.restoreAddr(addr, nil)...)
		}
	}
	for addr := range a.yielded {
		if _, decided := want[addr]; !decided && !joining[addr] {
			delete(a.yielded, addr)
		}
	}
	if err := a.state.Save(); err != nil {
		acts = append(acts, record("state", a.state.Path(), err))
	}
	return acts
}

// restoreAddr undoes what the daemon did to addr's endpoint, unless
// someone else changed it since. usage is what used read (nil: the last
// round's subflows; neither: not known, and an owned endpoint stays).
func (a *endpointFlags) restoreAddr(addr netip.Addr, usage map[netip.Addr]int) []api.ActionRecord {
	var acts []api.ActionRecord
	byAddr := a.byAddr()
	ep, exists := byAddr[addr]
	if e, ok := a.state.ReopeningOf(addr); ok && !exists {
		// A daemon died between removing the endpoint and adding it again
		// (prefer's re-add): put it back as it was.
		back, err := a.c.AddEndpoint(e)
		act := record("endpoint", fmt.Sprintf("put back %s", e), err)
		act.Reason = "it was being re-added (prefer's fast return) when a daemon stopped"
		acts = append(acts, act)
		if err != nil {
			return acts // the record stays: tried again next time
		}
		a.update(back)
		a.state.Forget(addr)
		delete(a.set, addr)
		return acts
	}
	if id, ok := a.state.Owned(addr); ok && exists && ep.ID == id {
		n, known := usage[addr], usage != nil
		if usage == nil {
			n, known = a.lastUsed[addr], a.lastUsed != nil
		}
		if !known || n > 0 {
			// Removing it would close the subflows from its address on
			// every connection (the initial subflow of those that started
			// there too): it stays, usable, owned, and goes once unused.
			if ep.Flags&pm.FlagBackup != 0 {
				nf := ep.Flags &^ pm.FlagBackup
				err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf})
				act := record("endpoint", fmt.Sprintf("set %s flags to %q", addr, nf.String()), err)
				act.Reason = "no policy decides on it any more"
				acts = append(acts, act)
				if err == nil {
					a.state.SetFlags(addr, ep.Flags, nf)
					ep.Flags = nf
					a.update(ep)
				}
			}
			if !a.leftInUse[addr] {
				a.leftInUse[addr] = true
				why := fmt.Sprintf("%d subflow(s) use %s", n, addr)
				if !known {
					why = fmt.Sprintf("which subflows use %s is not known", addr)
				}
				act := record("endpoint", fmt.Sprintf("keep %s (owned by mpsteer)", addr), nil)
				act.Result = Yielded
				act.Reason = why + ": removing the endpoint would close them; it is removed once none does"
				acts = append(acts, act)
			}
			delete(a.set, addr)
			return acts
		}
	}
	delete(a.leftInUse, addr)
	if ch, ok := a.state.Changed(addr); ok && exists {
		switch ep.Flags {
		case ch.Original:
		case ch.Set:
			err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: ch.Original})
			act := record("endpoint", fmt.Sprintf("restore %s flags to %q", addr, ch.Original.String()), err)
			act.Reason = "no policy decides on it any more"
			acts = append(acts, act)
			if err == nil {
				ep.Flags = ch.Original
				a.update(ep)
			}
		default:
			act := record("endpoint", fmt.Sprintf("leave %s flags %q", addr, ep.Flags.String()), nil)
			act.Result = Yielded
			act.Reason = fmt.Sprintf("another manager changed them after mpsteer set %q: not restored to %q", ch.Set, ch.Original)
			acts = append(acts, act)
		}
	}
	if id, ok := a.state.Owned(addr); ok && exists && ep.ID == id {
		err := a.c.DelEndpoint(pm.Endpoint{ID: id, Addr: addr})
		act := record("endpoint", fmt.Sprintf("remove %s (owned by mpsteer)", addr), err)
		act.Reason = "no policy decides on it any more"
		acts = append(acts, act)
		if err == nil {
			a.remove(id)
		}
	}
	a.state.Forget(addr)
	delete(a.set, addr)
	return acts
}

func (a *endpointFlags) Restore() []api.ActionRecord {
	var acts []api.ActionRecord
	for _, st := range a.reopening {
		// An endpoint removed and not added again yet: restoreAddr puts
		// back what it was (its record in the state file), or, owned by
		// mpsteer, leaves it removed (no subflow uses it then: the exit
		// would remove it).
		st.pending = nil
	}
	if err := a.readEndpoints(true); err != nil {
		return []api.ActionRecord{record("endpoint", "list endpoints", err)}
	}
	var usage map[netip.Addr]int
	if a.read != nil {
		u, err := a.read.usage()
		if err != nil {
			acts = append(acts, record("endpoint", "list the subflows", err))
		} else {
			usage = u
		}
	}
	for _, addr := range a.state.Addrs() {
		acts = append(acts, a.restoreAddr(addr, usage)...)
	}
	if err := a.state.Save(); err != nil {
		acts = append(acts, record("state", a.state.Path(), err))
	}
	return acts
}

// RestoreLeftovers undoes what a daemon that did not exit cleanly left in
// state (its file), where no one has changed it since; used as for
// NewEndpointFlags.
func RestoreLeftovers(c PM, state *crashstate.File, read SubflowReader) []api.ActionRecord {
	return (&endpointFlags{c: c, gate: &Gate{}, state: state, set: map[netip.Addr]pm.Endpoint{}, read: read, leftInUse: map[netip.Addr]bool{}}).Restore()
}

func (a *endpointFlags) Endpoints() []api.EndpointStatus {
	managed := a.scope.managedFunc()
	var out []api.EndpointStatus
	seen := map[netip.Addr]bool{}
	for _, e := range a.eps {
		addr := e.Addr.Unmap()
		seen[addr] = true
		st := api.EndpointStatus{Addr: addr.String(), ID: e.ID, Flags: e.Flags.String()}
		w, decided := a.want[addr]
		st.Managed = decided && managed(addr)
		_, st.Owned = a.state.Owned(addr)
		if decided {
			st.Want = "usable"
			if w {
				st.Want = "backup"
			}
			st.Reason = a.reasons[addr]
		}
		_, st.Yielded = a.yielded[addr]
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Addr < out[j].Addr })
	return out
}

// wantPerAddress folds the per-subflow decisions into one per local
// address (the flag lives on the address's endpoint): backup only if every
// established subflow from it should be, with the reason and policy of one
// that says why. A subflow no policy decides on keeps its address usable
// (fail open) once any policy decides on the address. stale marks
// addresses with a subflow whose own flag disagrees and whose join has
// completed (the kernel would send it an MP_PRIO now); joining is the
// subflows that disagree but whose join has not (one sent now would miss
// them). One pass, the addresses in a short list: it runs over every
// subflow every round.
func wantPerAddress(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow) (want map[netip.Addr]bool, reason, who map[netip.Addr]string, stale map[netip.Addr]bool, joining []observe.Subflow) {
	type per struct {
		addr            netip.Addr
		decided         bool
		backup          bool
		undecided       int // subflows no policy decides on
		reason, who     string
		flagOn, flagOff bool // a decided subflow's own flag (joins completed)
		// joins not completed: those flagged backup and those not
		joinOn, joinOff []int
	}
	var addrs []per
	for i := range sfs {
		sf := &sfs[i]
		addr := sf.Local.Addr().Unmap()
		j := 0
		for j < len(addrs) && addrs[j].addr != addr {
			j++
		}
		if j == len(addrs) {
			addrs = append(addrs, per{addr: addr, backup: true})
		}
		p := &addrs[j]
		d, ok := dec[policy.ID(*sf)]
		if !ok {
			p.undecided++
			continue
		}
		p.decided = true
		p.backup = p.backup && d.Backup
		if p.reason == "" || !d.Backup {
			p.reason, p.who = d.Reason, d.Policy
		}
		// A sampled MP_JOIN subflow whose join has not completed (no
		// FULLY_ESTABLISHED yet) would miss an MP_PRIO.
		if sf.JoinIncomplete() {
			if sf.BackupLocal {
				p.joinOn = append(p.joinOn, i)
			} else {
				p.joinOff = append(p.joinOff, i)
			}
			continue
		}
		p.flagOn = p.flagOn || sf.BackupLocal
		p.flagOff = p.flagOff || !sf.BackupLocal
	}
	want, reason, who, stale = map[netip.Addr]bool{}, map[netip.Addr]string{}, map[netip.Addr]string{}, map[netip.Addr]bool{}
	for _, p := range addrs {
		if !p.decided {
			continue
		}
		if p.backup && p.undecided > 0 {
			p.backup = false
			p.reason = fmt.Sprintf("%d subflow(s) of connections no policy decides on use this address: it stays usable (the endpoint's flag acts on every connection; per-subflow flags need the userspace path manager)", p.undecided)
		}
		want[p.addr], reason[p.addr], who[p.addr] = p.backup, p.reason, p.who
		if p.backup && p.flagOff || !p.backup && p.flagOn {
			stale[p.addr] = true
		}
		late := p.joinOn
		if p.backup {
			late = p.joinOff
		}
		for _, i := range late {
			joining = append(joining, sfs[i])
		}
	}
	return want, reason, who, stale, joining
}
