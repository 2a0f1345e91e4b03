package daemon

import (
	"fmt"
	"mpsteer/internal/config"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/bpfutil"
	"mpsteer/internal/mptcpize"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// appScope attributes connections to cgroups for the policies scoped to
// one (the kernel reports each socket's cgroup id through inet_diag; the
// daemon finds which path it is by walking the scoped cgroups' subtrees),
// and keeps the mptcpize program's cgroups in line with the config (a
// service's cgroup comes and goes with the service, with a new id each
// time).
type appScope struct {
	root    string // where the cgroup v2 hierarchy is mounted
	rootErr error
	paths   map[uint64]string    // cgroup id → path, at or below a scope
	unknown map[uint64]time.Time // ids under no scope, and when that was found
	walked  time.Time            // the last walk

	switcher *mptcpize.Switcher
	want     []string          // mptcpize's cgroups
	ids      map[string]uint64 // their ids now (absent: no such cgroup now)
	err      string
}

func newAppScope() *appScope {
	return &appScope{paths: map[uint64]string{}, unknown: map[uint64]time.Time{}, ids: map[string]uint64{}}
}

func (a *appScope) cgroupRoot() (string, error) {
	if a.root == "" && a.rootErr == nil {
		a.root, a.rootErr = bpfutil.Cgroup2Root()
	}
	return a.root, a.rootErr
}

// scopedCgroups lists the cgroups the engine's policies are scoped to.
func scopedCgroups(e *policy.Engine) []string {
	var out []string
	for _, p := range e.Policies {
		if s, ok := p.(*policy.Scoped); ok {
			out = append(out, s.Cgroup)
		}
		if s, ok := p.(policy.CgroupSelector); ok {
			out = append(out, s.Cgroups()...)
		}
	}
	return out
}

// cgroupID is the id of a cgroup (the inode number of its directory).
func cgroupID(root, path string) (uint64, bool) {
	var st syscall.Stat_t
	if syscall.Stat(filepath.Join(root, path), &st) != nil {
		return 0, false
	}
	return st.Ino, true
}

// walk records the id of every cgroup at or below path.
func (a *appScope) walk(root, path string, depth int) {
	id, ok := cgroupID(root, path)
	if !ok {
		return
	}
	a.paths[id] = path
	delete(a.unknown, id)
	if depth > 32 {
		return
	}
	ents, err := os.ReadDir(filepath.Join(root, path))
	if err != nil {
		return
	}
	for _, e := range ents {
		if e.IsDir() {
			a.walk(root, path+"/"+e.Name(), depth+1)
		}
	}
}

// resolve returns the path of cgroup id when it lies at or below one of
// scopes, else "". An id not found is looked for again after a second
// (a cgroup made meanwhile under a scope).
func (a *appScope) resolve(id uint64, scopes []string, now time.Time) string {
	if a == nil || id == 0 || len(scopes) == 0 {
		return ""
	}
	if p, ok := a.paths[id]; ok {
		for _, s := range scopes {
			if policy.InCgroup(p, s) {
				return p
			}
		}
		return ""
	}
	if t, ok := a.unknown[id]; ok && now.Sub(t) < time.Second || now.Sub(a.walked) < 100*time.Millisecond {
		return "" // looked for lately: at most one walk per 100 ms
	}
	a.walked = now
	root, err := a.cgroupRoot()
	if err != nil {
		return ""
	}
	for _, s := range scopes {
		a.walk(root, s, 0)
	}
	if p, ok := a.paths[id]; ok {
		return p
	}
	a.unknown[id] = now
	if len(a.unknown) > 4096 {
		a.unknown = map[uint64]time.Time{}
	}
	return ""
}

// checkMptcpize says why the config's mptcpize cannot run here, or nil.
// It makes the program when the config needs it and it is not there yet
// (the caller keeps it: prepared is the new switcher, or nil).
func (a *appScope) checkMptcpize(cfg *config.Config, cookie uint64) (prepared *mptcpize.Switcher, err error) {
	if a == nil || len(cfg.Mptcpize) == 0 {
		return nil, nil
	}
	if v, err := netnsutil.ReadSysctl("net.mptcp.enabled"); err != nil || strings.TrimSpace(v) != "1" {
		return nil, fmt.Errorf("%s: MPTCP is disabled in this network namespace (net.mptcp.enabled is not 1): the applications' sockets would fail to open; enable it (sysctl -w net.mptcp.enabled=1) or remove mptcpize", cfg.MptcpizeWhere)
	}
	if _, err := a.cgroupRoot(); err != nil {
		return nil, fmt.Errorf("%s: %v", cfg.MptcpizeWhere, err)
	}
	if a.switcher != nil {
		return nil, nil
	}
	s, err := mptcpize.New(cookie)
	if err != nil {
		return nil, fmt.Errorf("%s: %v", cfg.MptcpizeWhere, err)
	}
	return s, nil
}

// setMptcpize takes the config's cgroups (and a program checkMptcpize
// prepared); with none, the program goes.
func (a *appScope) setMptcpize(cgroups []string, prepared *mptcpize.Switcher) {
	if a == nil {
		return
	}
	// The scopes may have changed: ids under none so far may be in one.
	a.unknown = map[uint64]time.Time{}
	if prepared != nil {
		if a.switcher != nil {
			a.switcher.Close()
		}
		a.switcher = prepared
	}
	a.want = append([]string(nil), cgroups...)
	if len(a.want) == 0 && a.switcher != nil {
		a.switcher.Close()
		a.switcher, a.ids, a.err = nil, map[string]uint64{}, ""
	}
	a.sync()
}

// sync puts the ids of mptcpize's cgroups, as they are now, in the map.
func (a *appScope) sync() {
	if a == nil || a.switcher == nil {
		return
	}
	root, err := a.cgroupRoot()
	if err != nil {
		a.err = err.Error()
		return
	}
	ids := map[string]uint64{}
	for _, p := range a.want {
		if id, ok := cgroupID(root, p); ok {
			ids[p] = id
		}
	}
	same := len(ids) == len(a.ids)
	for p, id := range ids {
		if a.ids[p] != id {
			same = false
		}
	}
	if same && a.err == "" {
		return
	}
	var list []uint64
	for _, id := range ids {
		list = append(list, id)
	}
	if err := a.switcher.Set(list); err != nil {
		a.err = err.Error()
		return
	}
	a.ids, a.err = ids, ""
}

func (a *appScope) close() {
	if a != nil && a.switcher != nil {
		a.switcher.Close()
		a.switcher = nil
	}
}

func (a *appScope) status() *api.MptcpizeStatus {
	if a == nil || len(a.want) == 0 && a.switcher == nil {
		return nil
	}
	st := &api.MptcpizeStatus{Error: a.err}
	for _, p := range a.want {
		id, ok := a.ids[p]
		st.Cgroups = append(st.Cgroups, api.CgroupStatus{Path: p, ID: id, Present: ok})
	}
	sort.Slice(st.Cgroups, func(i, j int) bool { return st.Cgroups[i].Path < st.Cgroups[j].Path })
	if a.switcher != nil {
		st.Program = a.switcher.Stats()
	}
	return st
}

// refreshConn reads the connections again when an event names one the
// last sample did not have (just opened) and a policy is scoped: its
// cgroup decides which policies see it, and the event's reaction should
// not wait for the next sample. Called with d.mu held.
func (d *Daemon) refreshConn(tok uint32) {
	if d.sampler == nil || d.engine == nil || len(scopedCgroups(d.engine)) == 0 {
		return
	}
	if _, ok := d.view.conns[tok]; ok {
		return
	}
	cs, err := d.sampler.Conns()
	if err != nil {
		return
	}
	conns := make(map[uint32]observe.Conn, len(d.view.conns)+1)
	for k, v := range d.view.conns {
		conns[k] = v
	}
	for _, c := range cs {
		if _, ok := conns[c.Token]; !ok {
			conns[c.Token] = c
		}
	}
	d.view.conns = conns
}

// cgroupOf is a connection's cgroup id (the MPTCP socket's, else its
// subflows') and, when it lies at or below a scoped policy's cgroup, its
// path.
func (d *Daemon) cgroupOf(c *policy.Conn, conns map[uint32]observe.Conn, scopes []string, now time.Time) {
	if dc, ok := conns[c.Token]; ok && dc.CgroupID != 0 {
		c.CgroupID = dc.CgroupID
	}
	for _, sfs := range [][]observe.Subflow{c.Subflows, c.Pending} {
		for _, sf := range sfs {
			if c.CgroupID == 0 && sf.CgroupID != 0 {
				c.CgroupID = sf.CgroupID
			}
		}
	}
	c.Cgroup = d.scope.resolve(c.CgroupID, scopes, now)
}
