package policy

import (
	"fmt"
	"path"
	"strings"
	"sync"
)

// Scoped runs a policy on the connections of one cgroup (and of the
// cgroups below it) alone: a per-application policy, for a systemd
// service (/system.slice/foo.service) or a user's slice. The policy sees
// a snapshot of those connections only, so it neither decides nor acts on
// any other; the engine's rule stays (for a subflow's backup flag and rate
// cap the first policy with an opinion decides), so scoped policies listed
// before unscoped ones win on their connections.
type Scoped struct {
	Inner  Policy
	Cgroup string // clean, absolute, not "/"

	mu    sync.Mutex
	conns []string // tokens in scope in the last round
}

// CheckCgroup says what is wrong with a cgroup path a config names, or
// returns nil: it must be absolute from the cgroup v2 hierarchy's root,
// clean (no "..", ".", "//" or trailing "/") and not the root itself.
func CheckCgroup(p string) error {
	switch {
	case p == "":
		return fmt.Errorf("empty cgroup path (a cgroup v2 path from the hierarchy's root, e.g. /system.slice/foo.service)")
	case !strings.HasPrefix(p, "/"):
		return fmt.Errorf("%q is not absolute: a cgroup v2 path from the hierarchy's root starts with /, e.g. /system.slice/foo.service", p)
	case p == "/":
		return fmt.Errorf("/ is every process on the host: leave cgroup out for an unscoped policy")
	case path.Clean(p) != p:
		return fmt.Errorf("%q is not a clean path (write %s)", p, path.Clean(p))
	case strings.ContainsAny(p, "\n\x00"):
		return fmt.Errorf("%q contains a control character", p)
	}
	return nil
}

// InCgroup reports whether cgroup path p is scope or lies below it.
func InCgroup(p, scope string) bool {
	return p == scope || strings.HasPrefix(p, scope+"/")
}

// CgroupSelector is a policy that selects connections by cgroup in its
// own way (the atsss section's rules): the daemon resolves the cgroups of
// connections at and below these too.
type CgroupSelector interface {
	Cgroups() []string
}

// ConnDescriber is a policy that says, per connection, how it steers it
// (`mpsteer status` shows it under the connection).
type ConnDescriber interface {
	ConnSteering(token uint32) string
}

// NewScoped scopes p to a cgroup (checked with CheckCgroup by the caller).
func NewScoped(p Policy, cgroup string) *Scoped { return &Scoped{Inner: p, Cgroup: cgroup} }

// Name is the inner policy's, with its scope: prefer@/system.slice/foo.service.
func (s *Scoped) Name() string { return s.Inner.Name() + "@" + s.Cgroup }

// Decide hands the inner policy the connections in scope, and the
// outcomes of its own actions on them under its own name.
func (s *Scoped) Decide(snap *Snapshot) []Action {
	sub := &Snapshot{Now: snap.Now}
	in := map[uint32]bool{}
	var toks []string
	for _, c := range snap.Conns {
		if InCgroup(c.Cgroup, s.Cgroup) {
			sub.Conns = append(sub.Conns, c)
			in[c.Token] = true
			toks = append(toks, fmt.Sprintf("%08x", c.Token))
		}
	}
	s.mu.Lock()
	s.conns = toks
	s.mu.Unlock()
	name, inner := s.Name(), s.Inner.Name()
	for _, o := range snap.Outcomes {
		if !in[o.Action.Token] || o.Action.Policy != name && o.Action.Policy != "" {
			continue
		}
		o.Action.Policy = inner
		sub.Outcomes = append(sub.Outcomes, o)
	}
	return s.Inner.Decide(sub)
}

// ScopedStatus is a scoped policy's status: its cgroup, the connections
// in scope in its last round, and the inner policy's own status.
type ScopedStatus struct {
	Cgroup      string   `json:"cgroup"`
	Connections []string `json:"connections"` // tokens
	Policy      any      `json:"policy"`
}

// Status is the inner policy's, with the scope.
func (s *Scoped) Status() any {
	s.mu.Lock()
	toks := append([]string{}, s.conns...)
	s.mu.Unlock()
	return ScopedStatus{Cgroup: s.Cgroup, Connections: toks, Policy: s.Inner.Status()}
}

// Requirements are the inner policy's. Those that are not per connection
// (rto_max on a local address, the programs for rate caps and path-health
// reports) apply to every connection, scoped or not; a coupled congestion
// control applies to the scope's; backup addresses are left to the
// decisions (an endpoint's flag would reach every connection).
func (s *Scoped) Requirements() Requirements {
	r, ok := s.Inner.(Requirer)
	if !ok {
		return Requirements{}
	}
	req := r.Requirements()
	req.BackupAddrs = nil // per connection: the decisions do it for the scope's
	for i := range req.Coupled {
		req.Coupled[i].Cgroup = s.Cgroup
	}
	return req
}
