// Package config reads the daemon's YAML config: its settings, its
// policies (built through internal/policy), the atsss section's rules,
// the mode section's presets,
// the chains it declares, report_health and mptcpize. Every problem names
// the file, the line and the key, and what would be valid; a config is
// taken whole or refused whole.
package config

import (
	"errors"
	"fmt"
	"path/filepath"
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/datapath"
	"mpsteer/internal/policy"
	"mpsteer/internal/yamlcfg"
)

// Ways to flag subflows backup (backup_via).
const (
	BackupAuto     = "auto"     // endpoint under the kernel path manager, subflow under the userspace one
	BackupEndpoint = "endpoint" // the flag of the subflow's local address's endpoint
	BackupSubflow  = "subflow"  // each subflow's own flag (userspace path manager)
)

// Ways to cap a subflow's rate (rate_via).
const (
	// RatePacing caps the subflow's maximum pacing rate from a sockops
	// program: the sender paces at the cap, and MPTCP's scheduler, which
	// weighs subflows by their pacing rate, sends less there.
	RatePacing = "pacing"
	// RateRwnd clamps the receive window the peer advertises on the
	// subflow's incoming ACKs to cap × SRTT, with a datapath chain.
	RateRwnd = "rwnd"
	// RateCC switches the subflow to mpsteer's capping congestion control
	// (a tcp_congestion_ops struct_ops: Reno with the window held to
	// cap × SRTT) from the same sockops program, and back when the cap is
	// lifted.
	RateCC = "cc"
)

// Config is the daemon's YAML config.
type Config struct {
	File      string
	Interval  time.Duration
	BackupVia string // BackupAuto, BackupEndpoint, BackupSubflow
	RateVia   string // RatePacing, RateRwnd, RateCC
	// Persist is a bpffs directory for the chains' state (withheld
	// ADD_ADDR options, counters): it survives a daemon restart there.
	Persist  string
	Policies []policy.Policy
	// PolicyKeys are the policies' entries in canonical form, one per
	// policy: a reload keeps a running policy (and its state) whose entry
	// did not change.
	PolicyKeys []string
	// PolicyWhere says where each policy was declared (file:line: key, as
	// "c.yaml:4: policies[1] (fullmesh)"), for what only the host finds
	// wrong with it (the kernel's features).
	PolicyWhere []string
	Chains      []ChainEntry
	// Endpoints says which endpoints of the kernel path manager the
	// daemon may change (endpoints.go).
	Endpoints Endpoints
	// ReportHealth: this host reports its paths' health to its peers; nil
	// when it does not. ReportHealthWhere is file:line: report_health.
	ReportHealth      *ReportHealth
	ReportHealthWhere string
	// Mptcpize lists cgroups (v2 paths from the hierarchy's root) whose
	// applications' TCP sockets the kernel makes MPTCP.
	Mptcpize []string
	// MptcpizeWhere is file:line: mptcpize, for errors found on the host.
	MptcpizeWhere string
}

// ChainEntry is a chain the config declares, with where it was declared
// (for errors that only show when it is attached).
type ChainEntry struct {
	Spec  datapath.ChainSpec
	Where string // file:line: chains[i]
}

// Load reads and validates a config file against env (no more of it
// than yamlcfg accepts: /dev/zero is refused, not read for ever).
func Load(file string, env policy.Env) (*Config, error) {
	data, err := yamlcfg.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return Parse(file, data, env)
}

// Parse reads a config; every problem names file, line and key.
func Parse(file string, data []byte, env policy.Env) (*Config, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	cfg := parseMap(m, env)
	if err := m.Err(); err != nil {
		return nil, err
	}
	cfg.File = file
	return cfg, nil
}

// Check validates a daemon config embedded in another document (a lab
// scenario's variant), recording its problems in that document.
func Check(m *yamlcfg.Map) {
	parseMap(m, policy.Env{})
}

func parseMap(m *yamlcfg.Map, env policy.Env) *Config {
	cfg := &Config{}
	cfg.Interval = m.Duration("interval", 100*time.Millisecond)
	if cfg.Interval < 10*time.Millisecond {
		m.Errorf("interval", "%v is too short (at least 10ms)", cfg.Interval)
	}
	cfg.BackupVia = m.Enum("backup_via", BackupAuto, BackupAuto, BackupEndpoint, BackupSubflow)
	cfg.RateVia = m.Enum("rate_via", RatePacing, RatePacing, RateRwnd, RateCC)
	cfg.Persist = m.String("persist", "")
	if cfg.Persist != "" && !filepath.IsAbs(cfg.Persist) {
		m.Errorf("persist", "%q is not an absolute path (e.g. /sys/fs/bpf/mpsteer)", cfg.Persist)
	}
	cfg.Endpoints = parseEndpoints(m)
	cfg.ReportHealth = parseReportHealth(m)
	if cfg.ReportHealth != nil {
		cfg.ReportHealthWhere = m.Where("report_health")
	}
	seen := map[string]bool{}
	cfg.addATSSS(m, env, seen) // atsss.go: the ATSSS rules, as the first policy
	cfg.addMode(m, env, seen)  // presets.go: the mode section, as policies
	cfg.addCoupled(m, seen)    // coupled.go: the top-level coupled key, as a policy
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
		cfg.addPolicy(p, it.Map.Canonical(), fmt.Sprintf("%s (%s)", it.Map.Where(""), p.Name()))
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

// addPolicy adds a policy with its canonical entry and where it was
// declared.
func (cfg *Config) addPolicy(p policy.Policy, key, where string) {
	cfg.Policies = append(cfg.Policies, p)
	cfg.PolicyKeys = append(cfg.PolicyKeys, key)
	cfg.PolicyWhere = append(cfg.PolicyWhere, where)
}

// parseMptcpize reads the cgroups whose applications get MPTCP.
func (cfg *Config) parseMptcpize(m *yamlcfg.Map) {
	if !m.Has("mptcpize") {
		return
	}
	cfg.MptcpizeWhere = fmt.Sprintf("%s:%d: mptcpize", m.File(), m.Line())
	seen := map[string]bool{}
	for _, it := range m.List("mptcpize") {
		if it.Map != nil || it.Node != nil && it.Node.Kind != yaml.ScalarNode {
			m.ErrorAt(it.Node, it.Path, "a cgroup v2 path from the hierarchy's root, e.g. /system.slice/foo.service")
			continue
		}
		if it.Node != nil && len(seen) == 0 {
			cfg.MptcpizeWhere = fmt.Sprintf("%s:%d: mptcpize", m.File(), it.Node.Line)
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

// parseChain reads one chains: entry; expressions are compiled here so a
// bad one is refused with its file, line and key.
func parseChain(m *yamlcfg.Map) datapath.ChainSpec {
	c := datapath.ChainSpec{
		ID:     uint32(m.Int("id", 0, 0, datapath.MaxChains-1)),
		Dev:    m.String("dev", ""),
		Hook:   datapath.Hook(m.Enum("hook", "", "ingress", "egress")),
		Select: m.String("select", ""),
		Act:    m.String("act", ""),
	}
	if c.Dev == "" {
		m.Errorf("dev", "a chain needs a device (dev: eth0)")
	}
	if c.Hook == "" {
		m.Errorf("hook", "a chain needs a hook (valid: ingress, egress)")
	}
	if _, err := datapath.Compile(c.Select, c.Act, nil); err != nil {
		var ee *datapath.ExprError
		key := "act"
		if errors.As(err, &ee) && ee.What == "select" {
			key = "select"
		}
		m.Errorf(key, "%v", err)
	}
	return c
}

// Last-hop sources of report_health.
const (
	SourceTransport = "transport" // transport-level reports alone
	SourceLab       = "lab"
	SourceWifi      = "wifi"
)

// ReportHealth is the report_health section: this host, as the data's
// receiver, reports what it sees of each path to its peers on its ACKs.
type ReportHealth struct {
	// Source of the last hops' health: transport (none: transport-level
	// reports alone), lab or wifi.
	Source string
	// Window and MinSegments: the loss indications are counted over
	// Window; a path with fewer segments in it reports its loss as not
	// known.
	Window      time.Duration
	MinSegments int
	// Ports selects the connections to report on (none: all).
	Ports []uint16
	// LastHopWindow and MinPackets tune the source; Interfaces limits it.
	LastHopWindow time.Duration
	MinPackets    int
	Interfaces    []string
	// LabDir is the lab's state directory (default: found by the
	// namespace's name).
	LabDir string
}

// parseReportHealth reads report_health (nil when absent).
func parseReportHealth(m *yamlcfg.Map) *ReportHealth {
	r := m.Map("report_health")
	if r == nil {
		return nil
	}
	c := &ReportHealth{}
	c.Source = r.Enum("source", SourceTransport, SourceTransport, SourceLab, SourceWifi)
	c.Window = r.Duration("window", 100*time.Millisecond)
	if c.Window < 10*time.Millisecond || c.Window > 10*time.Second {
		r.Errorf("window", "%v is outside 10ms to 10s", c.Window)
	}
	c.MinSegments = r.Int("min_segments", 16, 1, 100000)
	for _, p := range r.Strings("ports") {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			r.Errorf("ports", "%q is not a port (1 to 65535)", p)
			continue
		}
		c.Ports = append(c.Ports, uint16(n))
	}
	if len(c.Ports) > 64 {
		r.Errorf("ports", "at most 64 ports")
	}
	c.LastHopWindow = r.Duration("last_hop_window", 0)
	if c.LastHopWindow < 0 || c.LastHopWindow > 2*time.Second {
		r.Errorf("last_hop_window", "%v is outside 0s (the source's default) to 2s", c.LastHopWindow)
	}
	c.MinPackets = r.Int("min_packets", 5, 1, 100000)
	c.Interfaces = r.Strings("interfaces")
	c.LabDir = r.String("lab_dir", "")
	r.Done()
	return c
}

// Key is the section in one string: two sections with the same key are
// the same.
func (c *ReportHealth) Key() string {
	if c == nil {
		return ""
	}
	return fmt.Sprintf("%+v", *c)
}
