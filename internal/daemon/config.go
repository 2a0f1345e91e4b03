// Package daemon wires mpsteer together in one network namespace:
// observe (inet_diag samples and path-manager events) → policies →
// actuators (path-manager netlink, BPF), with a unix-socket API and
// config reload. It fails open: on a clean exit it undoes its changes, and
// what it changes never stops MPTCP from working if it is killed.
package daemon

import (
	"fmt"
	"path/filepath"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/policy"
	"mpsteer/internal/yamlcfg"
)

// Config is the daemon's YAML config.
type Config struct {
	File      string
	Interval  time.Duration
	BackupVia string // auto, endpoint, subflow
	RateVia   string // pacing, rwnd, cc
	// Persist is a bpffs directory for the chains' state (withheld
	// ADD_ADDR options, counters): it survives a daemon restart there.
	Persist  string
	Policies []policy.Policy
	// policyKeys are the policies' entries in canonical form: a reload
	// keeps a running policy (and its state) whose entry did not change.
	policyKeys []string
	Chains     []ChainEntry
	// ReportHealth: this host reports its paths' health to its peers
	// (health.go); nil when it does not.
	ReportHealth *ReportHealthConfig
	// Mptcpize lists cgroups (v2 paths from the hierarchy's root) whose
	// applications' TCP sockets the kernel makes MPTCP (appscope.go).
	Mptcpize []string
	// mptcpizeWhere is file:line: mptcpize, for errors found on the host.
	mptcpizeWhere string
}

// ChainEntry is a chain the config declares, with where it was declared
// (for errors that only show when it is attached).
type ChainEntry struct {
	Spec  ChainConfig
	Where string // file:line: chains[i]
}

// ParseConfig reads a config; every problem names file, line and key.
func ParseConfig(file string, data []byte, env policy.Env) (*Config, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	cfg := parseConfigMap(m, env)
	if err := m.Err(); err != nil {
		return nil, err
	}
	cfg.File = file
	return cfg, nil
}

func parseConfigMap(m *yamlcfg.Map, env policy.Env) *Config {
	cfg := &Config{}
	cfg.Interval = m.Duration("interval", 100*time.Millisecond)
	if cfg.Interval < 10*time.Millisecond {
		m.Errorf("interval", "%v is too short (at least 10ms)", cfg.Interval)
	}
	cfg.BackupVia = m.Enum("backup_via", "auto", "auto", "endpoint", "subflow")
	cfg.RateVia = m.Enum("rate_via", RatePacing, RatePacing, RateRwnd, RateCC)
	cfg.Persist = m.String("persist", "")
	if cfg.Persist != "" && !filepath.IsAbs(cfg.Persist) {
		m.Errorf("persist", "%q is not an absolute path (e.g. /sys/fs/bpf/mpsteer)", cfg.Persist)
	}
	cfg.ReportHealth = parseReportHealth(m) // health.go
	seen := map[string]bool{}
	cfg.addMode(m, env, seen) // presets.go: the mode section, as policies
	cfg.parseMptcpize(m)
	for _, it := range m.List("policies") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a policy is a mapping with a name, e.g. {name: prefer, paths: [wifi]}")
			continue
		}
		// cgroup: the policy acts on that cgroup's connections alone.
		cgroup := it.Map.String("cgroup", "")
		if it.Map.Has("cgroup") {
			if err := policy.CheckCgroup(cgroup); err != nil {
				it.Map.Errorf("cgroup", "%v", err)
				cgroup = ""
			}
		}
		p := policy.Build(it.Map, env)
		if p == nil {
			continue
		}
		if cgroup != "" {
			if _, ok := p.(*policy.Spread); ok {
				it.Map.Errorf("cgroup", "spread steers the packets of every connection in the datapath and cannot be scoped to a cgroup")
				continue
			}
			p = policy.NewScoped(p, cgroup)
		}
		if seen[p.Name()] {
			it.Map.Errorf("name", "policy %q is listed twice (the same policy may be listed once per cgroup: give each entry its own cgroup)", p.Name())
		}
		seen[p.Name()] = true
		cfg.Policies = append(cfg.Policies, p)
		cfg.policyKeys = append(cfg.policyKeys, it.Map.Canonical())
	}
	for i, it := range m.List("chains") {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a chain is a mapping, e.g. {dev: eth0, hook: ingress, select: ..., act: ...}")
			continue
		}
		cfg.Chains = append(cfg.Chains, ChainEntry{Spec: parseChain(it.Map),
			Where: fmt.Sprintf("%s:%d: chains[%d]", m.File(), it.Map.Line(), i)})
	}
	m.Done()
	return cfg
}

// CheckConfig validates a daemon config embedded in another document (a
// lab scenario's variant), recording problems in that document.
func CheckConfig(m *yamlcfg.Map) {
	parseConfigMap(m, policy.Env{})
}

// parseMptcpize reads the cgroups whose applications get MPTCP.
func (cfg *Config) parseMptcpize(m *yamlcfg.Map) {
	if !m.Has("mptcpize") {
		return
	}
	cfg.mptcpizeWhere = fmt.Sprintf("%s:%d: mptcpize", m.File(), m.Line())
	seen := map[string]bool{}
	for _, it := range m.List("mptcpize") {
		if it.Map != nil || it.Node != nil && it.Node.Kind != yaml.ScalarNode {
			m.ErrorAt(it.Node, it.Path, "a cgroup v2 path from the hierarchy's root, e.g. /system.slice/foo.service")
			continue
		}
		if it.Node != nil && len(seen) == 0 {
			cfg.mptcpizeWhere = fmt.Sprintf("%s:%d: mptcpize", m.File(), it.Node.Line)
		}
		if err := policy.CheckCgroup(it.Scalar); err != nil {
			m.ErrorAt(it.Node, it.Path, "%v", err)
			continue
		}
		if seen[it.Scalar] {
			m.ErrorAt(it.Node, it.Path, "%s is listed twice", it.Scalar)
			continue
		}
		seen[it.Scalar] = true
		cfg.Mptcpize = append(cfg.Mptcpize, it.Scalar)
	}
}
