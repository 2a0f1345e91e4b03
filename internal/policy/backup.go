package policy

import (
	"fmt"
	"net/netip"
	"sort"
	"sync"

	"mpsteer/internal/yamlcfg"
)

// StaticBackup marks every subflow from chosen interfaces or local
// addresses backup, all the time: MPTCP sends on them only when no other
// subflow is usable. It is the backup action with no algorithm around it
// (OpenMPTCProuter's per-interface "backup" mode); subflows elsewhere are
// left to the other policies.
type StaticBackup struct {
	mu sync.Mutex
	StaticBackupConfig
	env    Env
	status []string
}

// StaticBackupConfig is what backup reads of its config entry.
type StaticBackupConfig struct {
	// Paths are the interfaces or local addresses whose subflows are
	// backup.
	Paths targets `yaml:"paths"`
}

func buildBackup(m *yamlcfg.Map, env Env) Policy {
	p := &StaticBackup{env: env}
	yamlcfg.Decode(m, &p.StaticBackupConfig)
	if len(p.Paths) == 0 && !m.Failed("paths") {
		m.Errorf("paths", "name the interfaces or addresses whose subflows are backup, e.g. paths: [wwan0]")
	}
	return p
}

// NewStaticBackup makes the given interfaces or addresses backup.
func NewStaticBackup(env Env, paths []string) *StaticBackup {
	return &StaticBackup{StaticBackupConfig: StaticBackupConfig{Paths: append(targets(nil), paths...)}, env: env}
}

// Name is "backup".
func (p *StaticBackup) Name() string { return "backup" }

// addrs resolves the paths: each backup address with the path (interface
// or address) that names it.
func (p *StaticBackup) addrs() map[netip.Addr]string {
	why := map[netip.Addr]string{}
	for _, t := range p.Paths {
		if a, err := netip.ParseAddr(t); err == nil {
			why[a.Unmap()] = t
			continue
		}
		if p.env.Addrs != nil {
			addrs, _ := p.env.Addrs(t)
			for _, a := range addrs {
				if _, set := why[a.Unmap()]; !set {
					why[a.Unmap()] = t
				}
			}
		}
	}
	return why
}

// Requirements: the backup addresses are backup on every connection, so
// subflows join from them as backup (Requirements.BackupAddrs).
func (p *StaticBackup) Requirements() Requirements {
	addrs := map[netip.Addr]string{}
	for a := range p.addrs() {
		addrs[a] = p.Name()
	}
	return Requirements{BackupAddrs: addrs}
}

// Decide marks every subflow from a backup interface or address backup.
func (p *StaticBackup) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	why := p.addrs()
	var out []Action
	var status []string
	for _, c := range s.Conns {
		for _, sf := range c.Subflows {
			t, ok := why[sf.Local.Addr().Unmap()]
			if !ok {
				continue
			}
			out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: true,
				Reason: fmt.Sprintf("%s is a backup path: used only when no other subflow is", t)})
			status = append(status, fmt.Sprintf("%s backup (%s)", ID(sf), t))
		}
	}
	sort.Strings(status)
	p.status = status
	return out
}

// Status lists the paths and the subflows marked backup.
func (p *StaticBackup) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return map[string]any{"paths": p.Paths, "backup": p.status}
}
