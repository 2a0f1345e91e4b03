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

	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// Action is one change the daemon made, for status and logs.
type Action struct {
	At     time.Time `json:"at"`
	What   string    `json:"what"`
	Reason string    `json:"reason,omitempty"`
	Error  string    `json:"error,omitempty"`
}

// backupActuator turns per-subflow backup decisions into kernel changes.
type backupActuator interface {
	// Apply makes the kernel match the decisions for the given subflows.
	// A full apply (every subflow of the namespace) also undoes changes
	// that no decision asks for any more; a partial one (a single new
	// subflow, from an event) does not.
	Apply(dec map[policy.SubflowID]policy.Decision, sfs []observe.Subflow, full bool) []Action
	// Restore undoes everything this actuator changed.
	Restore() []Action
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
}

func (a *endpointActuator) Mode() string { return "endpoint" }

func (a *endpointActuator) Apply(dec map[policy.SubflowID]policy.Decision, sfs []observe.Subflow, full bool) []Action {
	want := map[netip.Addr]bool{}
	reason := map[netip.Addr]string{}
	for _, sf := range sfs {
		d, ok := dec[policy.ID(sf)]
		if !ok {
			continue
		}
		addr := sf.Local.Addr()
		if prev, seen := want[addr]; seen {
			want[addr] = prev && d.Backup
		} else {
			want[addr] = d.Backup
		}
		if reason[addr] == "" || !d.Backup {
			reason[addr] = d.Policy + ": " + d.Reason
		}
	}
	// stale: a subflow's own flag disagrees with what its address wants.
	stale := map[netip.Addr]bool{}
	for _, sf := range sfs {
		if w, ok := want[sf.Local.Addr()]; ok {
			if _, decided := dec[policy.ID(sf)]; decided && sf.BackupLocal != w {
				stale[sf.Local.Addr()] = true
			}
		}
	}
	var acts []Action
	eps, err := a.c.Endpoints()
	if err != nil {
		return []Action{{At: time.Now(), What: "list endpoints", Error: err.Error()}}
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
			created, err := a.c.AddEndpoint(pm.Endpoint{Addr: addr})
			act := Action{At: time.Now(), What: fmt.Sprintf("add endpoint %s (owned by mpsteer)", addr)}
			if err != nil {
				act.Error = err.Error()
				acts = append(acts, act)
				continue
			}
			acts = append(acts, act)
			a.state.owned(addr, created.ID)
			ep = created
		}
		nf := ep.Flags &^ pm.FlagBackup
		if backup {
			nf |= pm.FlagBackup
		}
		what := fmt.Sprintf("endpoint %s backup=%v", addr, backup)
		if (ep.Flags&pm.FlagBackup != 0) == backup {
			// The endpoint says so, but a subflow may have missed the
			// MP_PRIO (one that was still joining when the flag changed):
			// flip the flag off and on to send it again.
			if !full || !stale[addr] {
				continue
			}
			if err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf ^ pm.FlagBackup}); err != nil {
				acts = append(acts, errAction(what+" (resend)", err))
				continue
			}
			what += " (resent: a subflow had missed it)"
		}
		a.state.changed(addr, ep.Flags)
		err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: nf})
		act := errAction(what, err)
		act.Reason = reason[addr]
		acts = append(acts, act)
	}
	// Addresses nobody decides on any more go back to how they were.
	for _, addr := range a.state.addrs() {
		if _, decided := want[addr]; !decided && full {
			acts = append(acts, a.restoreAddr(addr, byAddr)...)
		}
	}
	a.state.save()
	return acts
}

func (a *endpointActuator) restoreAddr(addr netip.Addr, byAddr map[netip.Addr]pm.Endpoint) []Action {
	var acts []Action
	ep, exists := byAddr[addr]
	if orig, ok := a.state.original(addr); ok && exists && ep.Flags != orig {
		err := a.c.SetEndpointFlags(pm.Endpoint{ID: ep.ID, Addr: addr, Flags: orig})
		acts = append(acts, errAction(fmt.Sprintf("restore endpoint %s flags to %q", addr, orig.String()), err))
	}
	if id, ok := a.state.ownedID(addr); ok && exists {
		err := a.c.DelEndpoint(pm.Endpoint{ID: id, Addr: addr})
		acts = append(acts, errAction(fmt.Sprintf("remove endpoint %s (owned by mpsteer)", addr), err))
	}
	a.state.forget(addr)
	return acts
}

func (a *endpointActuator) Restore() []Action {
	eps, _ := a.c.Endpoints()
	byAddr := map[netip.Addr]pm.Endpoint{}
	for _, e := range eps {
		byAddr[e.Addr] = e
	}
	var acts []Action
	for _, addr := range a.state.addrs() {
		acts = append(acts, a.restoreAddr(addr, byAddr)...)
	}
	a.state.save()
	return acts
}

func errAction(what string, err error) Action {
	act := Action{At: time.Now(), What: what}
	if err != nil {
		act.Error = err.Error()
	}
	return act
}

// subflowActuator works with the userspace path manager: each subflow's
// backup flag is set on its own (MPTCP_PM_CMD_SET_FLAGS with a token).
type subflowActuator struct {
	c       *pm.Client
	changed map[policy.SubflowID]uint32 // subflow → token, flags changed by us
}

func (a *subflowActuator) Mode() string { return "subflow" }

func (a *subflowActuator) Apply(dec map[policy.SubflowID]policy.Decision, sfs []observe.Subflow, full bool) []Action {
	var acts []Action
	for _, sf := range sfs {
		id := policy.ID(sf)
		d, ok := dec[id]
		if !ok && full {
			if _, mine := a.changed[id]; mine && sf.BackupLocal {
				acts = append(acts, a.set(sf.Token, id, false, "no policy decides it any more"))
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
		acts = append(acts, a.set(sf.Token, id, d.Backup, d.Policy+": "+d.Reason))
		a.changed[id] = sf.Token
	}
	return acts
}

func (a *subflowActuator) set(token uint32, id policy.SubflowID, backup bool, reason string) Action {
	var f pm.Flags
	if backup {
		f = pm.FlagBackup
	}
	err := a.c.SetSubflowFlags(token, id.Local, id.Remote, f)
	act := errAction(fmt.Sprintf("subflow %s backup=%v", id, backup), err)
	act.Reason = reason
	return act
}

func (a *subflowActuator) Restore() []Action {
	var acts []Action
	for id, tok := range a.changed {
		acts = append(acts, a.set(tok, id, false, "daemon exit"))
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
	}
}

func loadState(path string) *stateFile {
	s := &stateFile{path: path}
	s.S.Original = map[netip.Addr]pm.Flags{}
	s.S.Owned = map[netip.Addr]uint8{}
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &s.S)
	}
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
