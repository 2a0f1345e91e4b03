package daemon

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// record makes the record of one change the daemon made.
func record(kind, target string, err error) api.ActionRecord {
	r := api.ActionRecord{At: time.Now(), Kind: kind, Target: target, Result: string(policy.Applied)}
	if err != nil {
		r.Result, r.Error = string(policy.Refused), err.Error()
	}
	return r
}

// backupRecord is the record of a backup flag change.
func backupRecord(target string, token uint32, backup bool, err error) api.ActionRecord {
	r := record(string(policy.Backup), target, err)
	r.Backup = &backup
	if token != 0 {
		r.Token = fmt.Sprintf("%08x", token)
	}
	return r
}

// backupActuator turns per-subflow backup decisions into kernel changes.
type backupActuator interface {
	// Apply makes the kernel match the decisions for the given subflows.
	// A full apply (every subflow of the namespace) also undoes changes
	// that no decision asks for any more; a partial one (a single new
	// subflow, from an event) does not.
	Apply(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow, full bool) []api.ActionRecord
	// Restore undoes everything this actuator changed.
	Restore() []api.ActionRecord
	Mode() string
}

// endpointActuator works with the in-kernel path manager, whose backup
// flag lives on endpoints (local addresses): per-subflow flags are refused
// unless the userspace path manager owns the connection. A local address
// is made backup when every decided subflow on it should be backup (one
// connection that wants it keeps it usable: fail open). Addresses that have
// no endpoint (the initial subflow's) get one the daemon owns.
type endpointActuator struct {
	c     *pm.Client
	state *stateFile
	// joinBackup: a policy wants new subflows to join as backup (see
	// policy.Requirements.JoinBackup): endpoints that open subflows are
	// kept backup while no decision wants their address usable.
	joinBackup bool
	// gate holds back changes the kernel refused (refusals.go).
	gate retryGate
	// recheck: the last Apply made an address usable (cleared its flag or
	// sent the MP_PRIO again), or a subflow whose flag disagrees is still
	// joining: the kernel sends MP_PRIO only to subflows whose join has
	// completed (the fourth ACK, an RTT after the event), so the daemon
	// looks again soon (daemon.checkSoon) and sends it again then.
	recheck bool
}

func (a *endpointActuator) Mode() string { return "endpoint" }

func (a *endpointActuator) Apply(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow, full bool) []api.ActionRecord {
	now := time.Now()
	if full {
		defer a.gate.sweep()
	}
	want, reason, who, stale, stillJoining := wantPerAddress(dec, sfs)
	a.recheck = stillJoining
	var acts []api.ActionRecord
	eps, err := a.c.Endpoints()
	if err != nil {
		return []api.ActionRecord{record("endpoint", "list endpoints", err)}
	}
	byAddr := map[netip.Addr]pm.Endpoint{}
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	for addr, backup := range want {
		ep, exists := byAddr[addr]
		if !exists {
			if !backup {
				continue // no endpoint means no backup flag: nothing to do
			}
			key := "add " + addr.String()
			if !a.gate.ready(key, now) {
				continue
			}
			created, err := a.c.AddEndpoint(pm.Endpoint{Addr: addr})
			a.gate.done(key, err, now)
			act := record("endpoint", fmt.Sprintf("add %s (owned by mpsteer)", addr), err)
			act.Reason = "the flag lives on an endpoint; this address has none"
			acts = append(acts, act)
			if err != nil {
				continue
			}
			a.state.owned(addr, created.ID)
			ep = created
		}
		nf := ep.Flags &^ pm.FlagBackup
		if backup {
			nf |= pm.FlagBackup
		}
		target := "endpoint " + addr.String()
		why := reason[addr]
		key := fmt.Sprintf("flags %s %v", addr, backup)
		if !a.gate.ready(key, now) {
			continue // refused before: not again until its backoff is over
		}
		resend := (ep.Flags&pm.FlagBackup != 0) == backup
		if resend {
			// The endpoint says so, but a subflow may have missed the
			// MP_PRIO (one that was still joining when the flag changed):
			// flip the flag off and on to send it again.
			if !full || !stale[addr] {
				continue
			}
			if err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf ^ pm.FlagBackup}); err != nil {
				acts = append(acts, backupRecord(target+" (resend)", 0, backup, err))
				a.gate.done(key, err, now)
				continue
			}
			why += " (resent: a subflow had missed it)"
		}
		a.state.changed(addr, ep.Flags)
		err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf})
		a.gate.done(key, err, now)
		a.recheck = a.recheck || !backup && err == nil
		act := backupRecord(target, 0, backup, err)
		act.Policy, act.Reason = who[addr], why
		acts = append(acts, act)
	}
	// Endpoints that open subflows, with no decision on their address:
	// backup while a policy wants joins as backup (an MP_JOIN from a
	// backup endpoint carries the B bit: the subflow carries nothing until
	// a decision makes its address usable).
	joining := map[netip.Addr]bool{}
	if a.joinBackup && full {
		for _, e := range eps {
			if _, decided := want[e.Addr]; decided || e.Flags&pm.FlagSubflow == 0 {
				continue
			}
			if _, owned := a.state.ownedID(e.Addr); owned {
				continue
			}
			joining[e.Addr] = true
			key := fmt.Sprintf("flags %s %v", e.Addr, true)
			if e.Flags&pm.FlagBackup != 0 || !a.gate.ready(key, now) {
				continue
			}
			a.state.changed(e.Addr, e.Flags)
			err := a.c.SetEndpointFlags(pm.Endpoint{ID: e.ID, Addr: e.Addr, Flags: e.Flags | pm.FlagBackup})
			a.gate.done(key, err, now)
			act := backupRecord("endpoint "+e.Addr.String(), 0, true, err)
			act.Reason = "new subflows join as backup until a policy lets them carry"
			acts = append(acts, act)
		}
	}
	// Addresses nobody decides on any more go back to how they were.
	for _, addr := range a.state.addrs() {
		if _, decided := want[addr]; !decided && full && !joining[addr] {
			acts = append(acts, a.restoreAddr(addr, byAddr)...)
		}
	}
	a.state.save()
	return acts
}

func (a *endpointActuator) restoreAddr(addr netip.Addr, byAddr map[netip.Addr]pm.Endpoint) []api.ActionRecord {
	var acts []api.ActionRecord
	ep, exists := byAddr[addr]
	if orig, ok := a.state.original(addr); ok && exists && ep.Flags != orig {
		err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: orig})
		act := record("endpoint", fmt.Sprintf("restore %s flags to %q", addr, orig.String()), err)
		act.Reason = "no policy decides on it any more"
		acts = append(acts, act)
	}
	if id, ok := a.state.ownedID(addr); ok && exists {
		err := a.c.DelEndpoint(pm.Endpoint{ID: id, Addr: addr})
		act := record("endpoint", fmt.Sprintf("remove %s (owned by mpsteer)", addr), err)
		act.Reason = "no policy decides on it any more"
		acts = append(acts, act)
	}
	a.state.forget(addr)
	return acts
}

func (a *endpointActuator) Restore() []api.ActionRecord {
	eps, _ := a.c.Endpoints()
	byAddr := map[netip.Addr]pm.Endpoint{}
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	var acts []api.ActionRecord
	for _, addr := range a.state.addrs() {
		acts = append(acts, a.restoreAddr(addr, byAddr)...)
	}
	a.state.save()
	return acts
}

// subflowActuator works with the userspace path manager: each subflow's
// backup flag is set on its own (MPTCP_PM_CMD_SET_FLAGS with a token).
type subflowActuator struct {
	c       *pm.Client
	changed map[policy.SubflowID]uint32 // subflow → token, flags changed by us
	// gate holds back changes the kernel refused (refusals.go).
	gate retryGate
}

func (a *subflowActuator) Mode() string { return "subflow" }

func (a *subflowActuator) Apply(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow, full bool) []api.ActionRecord {
	now := time.Now()
	if full {
		defer a.gate.sweep()
	}
	var acts []api.ActionRecord
	for _, sf := range sfs {
		id := policy.ID(sf)
		d, ok := dec[id]
		if !ok && full {
			if _, mine := a.changed[id]; mine && sf.BackupLocal {
				acts = append(acts, a.set(sf.Token, id, false, "", "no policy decides it any more"))
				delete(a.changed, id)
			}
			continue
		}
		if !ok {
			continue
		}
		if sf.BackupLocal == d.Backup {
			continue
		}
		key := fmt.Sprintf("%s %v", id, d.Backup)
		if !a.gate.ready(key, now) {
			continue
		}
		act := a.set(sf.Token, id, d.Backup, d.Policy, d.Reason)
		acts = append(acts, act)
		if act.Result != string(policy.Applied) {
			a.gate.done(key, errors.New(act.Error), now)
			continue
		}
		a.gate.done(key, nil, now)
		a.changed[id] = sf.Token
	}
	return acts
}

func (a *subflowActuator) set(token uint32, id policy.SubflowID, backup bool, who, reason string) api.ActionRecord {
	var f pm.Flags
	if backup {
		f = pm.FlagBackup
	}
	err := a.c.SetSubflowFlags(token, id.Local.AddrPort(), id.Remote.AddrPort(), f)
	act := backupRecord(id.String(), token, backup, err)
	act.Policy, act.Reason = who, reason
	return act
}

func (a *subflowActuator) Restore() []api.ActionRecord {
	var acts []api.ActionRecord
	for id, tok := range a.changed {
		acts = append(acts, a.set(tok, id, false, "", "daemon exit"))
	}
	a.changed = map[policy.SubflowID]uint32{}
	return acts
}

// stateFile remembers, on disk, what the endpoint actuator changed, so that
// a daemon that was killed can be cleaned up by the next one.
type stateFile struct {
	mu   sync.Mutex
	path string
	S    struct {
		Original map[netip.Addr]pm.Flags `json:"original_flags"`
		Owned    map[netip.Addr]uint8    `json:"owned_endpoints"`
		// NetnsInode is the namespace's inode: a file whose namespace is
		// gone is removed by the next daemon to start (statefiles.go).
		NetnsInode uint64 `json:"netns_inode,omitempty"`
	}
}

func loadState(path string) *stateFile {
	s := &stateFile{path: path}
	s.S.Original = map[netip.Addr]pm.Flags{}
	s.S.Owned = map[netip.Addr]uint8{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &s.S)
	}
	s.S.NetnsInode = ownNetnsInode() // this daemon's, written with the state
	return s
}

func (s *stateFile) changed(a netip.Addr, orig pm.Flags) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.S.Original[a]; !ok {
		s.S.Original[a] = orig
	}
}

func (s *stateFile) owned(a netip.Addr, id uint8) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.S.Owned[a] = id
}

func (s *stateFile) original(a netip.Addr) (pm.Flags, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.S.Original[a]
	return f, ok
}

func (s *stateFile) ownedID(a netip.Addr) (uint8, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	id, ok := s.S.Owned[a]
	return id, ok
}

func (s *stateFile) forget(a netip.Addr) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.S.Original, a)
	delete(s.S.Owned, a)
}

func (s *stateFile) addrs() []netip.Addr {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[netip.Addr]bool{}
	var out []netip.Addr
	for a := range s.S.Original {
		seen[a] = true
		out = append(out, a)
	}
	for a := range s.S.Owned {
		if !seen[a] {
			out = append(out, a)
		}
	}
	return out
}

func (s *stateFile) save() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.S.Original) == 0 && len(s.S.Owned) == 0 {
		if err := os.Remove(s.path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return
		}
		return
	}
	b, _ := json.MarshalIndent(s.S, "", "  ")
	os.MkdirAll(filepath.Dir(s.path), 0o755)
	tmp := s.path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, s.path)
	}
}

// wantPerAddress folds the per-subflow decisions into one per local
// address (the flag lives on the address's endpoint): backup only if every
// decided subflow from it is, with the reason and policy of one that says
// why; stale marks addresses with a subflow whose own flag disagrees and
// whose join has completed (the kernel would send it an MP_PRIO now);
// joining reports a subflow that disagrees but whose join has not (one
// sent now would miss it). One pass, the addresses in a short list: it
// runs over every subflow every round.
func wantPerAddress(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow) (want map[netip.Addr]bool, reason, who map[netip.Addr]string, stale map[netip.Addr]bool, joining bool) {
	type per struct {
		addr            netip.Addr
		backup          bool
		reason, who     string
		flagOn, flagOff bool // a decided subflow's own flag (joins completed)
		joinOn, joinOff bool // the same, joins not completed
	}
	var addrs []per
	for i := range sfs {
		sf := &sfs[i]
		d, ok := dec[policy.ID(*sf)]
		if !ok {
			continue
		}
		addr := sf.Local.Addr()
		j := 0
		for j < len(addrs) && addrs[j].addr != addr {
			j++
		}
		if j == len(addrs) {
			addrs = append(addrs, per{addr: addr, backup: true})
		}
		p := &addrs[j]
		p.backup = p.backup && d.Backup
		if p.reason == "" || !d.Backup {
			p.reason, p.who = d.Reason, d.Policy
		}
		// A sampled MP_JOIN subflow whose join has not completed (no
		// FULLY_ESTABLISHED yet) would miss an MP_PRIO.
		if sf.Cookie != 0 && sf.MPFlags&observe.FlagJoinLoc != 0 && sf.MPFlags&observe.FlagFullyEst == 0 {
			p.joinOn = p.joinOn || sf.BackupLocal
			p.joinOff = p.joinOff || !sf.BackupLocal
			continue
		}
		p.flagOn = p.flagOn || sf.BackupLocal
		p.flagOff = p.flagOff || !sf.BackupLocal
	}
	want, reason, who, stale = map[netip.Addr]bool{}, map[netip.Addr]string{}, map[netip.Addr]string{}, map[netip.Addr]bool{}
	for _, p := range addrs {
		want[p.addr], reason[p.addr], who[p.addr] = p.backup, p.reason, p.who
		if p.backup && p.flagOff || !p.backup && p.flagOn {
			stale[p.addr] = true
		}
		if p.backup && p.joinOff || !p.backup && p.joinOn {
			joining = true
		}
	}
	return want, reason, who, stale, joining
}
