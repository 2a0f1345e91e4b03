// Package scenario reads lab scenario files: the hosts, the paths between
// them, the traffic to run, timed events, and the variants to compare.
// Every mistake is reported with file, line and key, and what would be valid.
package scenario

import (
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"mpsteer/internal/yamlcfg"
)

// Scenario is a parsed scenario file.
type Scenario struct {
	File        string
	Name        string
	Description string
	Seed        uint64
	Client      Host
	Server      Host
	Paths       []*Path
	Core        *Core
	// Tenants is a multi-tenant cloud world (tenants.go), instead of
	// paths and a core.
	Tenants  *Tenants
	Traffic  []Traffic
	Events   []Event
	Variants []*Variant
	// Primary and Compare: what results compare (compare.go).
	Primary Primary
	Compare []string
	// Preferred names the path a scenario's claim prefers (prefer's
	// return after an outage): the runner measures the return to it
	// (link_up_to_first_data_ms, preferred_share_after_return). Empty
	// when the scenario says none.
	Preferred string
}

// Load reads and validates a scenario file.
func Load(file string) (*Scenario, error) {
	m, err := yamlcfg.ParseFile(file)
	if err != nil {
		return nil, err
	}
	return parse(m)
}

// Parse reads a scenario from memory (file is used in messages and to
// resolve trace paths).
func Parse(file string, data []byte) (*Scenario, error) {
	m, err := yamlcfg.Parse(file, data)
	if err != nil {
		return nil, err
	}
	return parse(m)
}

func parse(m *yamlcfg.Map) (*Scenario, error) {
	s := &Scenario{File: m.File()}
	base := strings.TrimSuffix(filepath.Base(m.File()), filepath.Ext(m.File()))
	s.Name = m.String("name", base)
	s.Description = m.String("description", "")
	s.Seed = uint64(m.Int("seed", 1, 0, 1<<31-1))
	hosts := m.Map("hosts")
	s.Client = parseHost(hosts, "client")
	s.Server = parseHost(hosts, "server")
	hosts.Done()

	dir := filepath.Dir(m.File())
	seen := map[string]bool{}
	if m.Has("tenants") {
		if tm := m.Map("tenants"); tm != nil {
			s.Tenants = parseTenants(tm, dir)
		}
		for _, k := range []string{"paths", "core", "hosts"} {
			if m.Has(k) {
				m.Errorf(k, "a tenants world has no %s: its hosts are the hypervisors and VMs of tenants (give cc, rmem and wmem per VM)", k)
			}
		}
	}
	items := m.List("paths")
	if len(items) == 0 && !m.Has("tenants") {
		m.Errorf("paths", "a scenario needs at least one path (or a tenants world)")
	}
	if len(items) > MaxPaths {
		m.Errorf("paths", "%d paths given; at most %d are supported", len(items), MaxPaths)
	}
	for _, it := range items {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a path is a mapping with at least a name (e.g. {name: wifi, rate: 10mbit, delay: 10ms})")
			continue
		}
		p := parsePath(it.Map, dir)
		if p.Name != "" && seen[p.Name] {
			it.Map.Errorf("name", "path name %q is used twice", p.Name)
		}
		seen[p.Name] = true
		s.Paths = append(s.Paths, p)
	}
	var via []string
	for _, p := range s.Paths {
		if p.ViaCore {
			via = append(via, p.Name)
		}
	}
	if c := m.Map("core"); c != nil {
		s.Core = parseCore(c, dir, via)
	}
	for _, p := range s.Paths {
		if p.ViaCore && s.Core == nil && !m.Failed("core") {
			m.Errorf("paths", "path %q is via core, but the scenario has no core section", p.Name)
		}
	}
	ec := &eventContext{paths: seen, plain: map[string]bool{}, core: s.Core, coreFailed: m.Failed("core") || (s.Core != nil && s.Core.bad), dir: dir,
		daemonHosts: []string{"client", "server"}, s: s}
	if s.Tenants != nil {
		// Events name the physical links as they name core links.
		ec.core, ec.tenants = &Core{Links: s.Tenants.Links}, s.Tenants
		ec.coreFailed = m.Failed("tenants") || len(s.Tenants.Links) == 0
		ec.daemonHosts = append(ec.daemonHosts, s.Tenants.Hosts()...)
	} else if m.Has("tenants") {
		ec.coreFailed = true
	}
	for _, p := range s.Paths {
		if p.Plain {
			ec.plain[p.Name] = true
		}
	}

	trafficErrs := m.Errs().Count()
	titems := m.List("traffic")
	if len(titems) > MaxTraffic {
		m.Errorf("traffic", "%d traffic generators given; at most %d are supported", len(titems), MaxTraffic)
	}
	for _, it := range titems {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "traffic is a mapping such as {type: bulk, duration: 10s}")
			continue
		}
		s.Traffic = append(s.Traffic, parseTraffic(it.Map, seen, s.Tenants))
	}
	// Events at or after the end of time-bound traffic would never run
	// (the run ends with its traffic); with a size-bound transfer the end
	// is not known and every time is accepted, and so it is when the
	// traffic itself has errors (its end would be a guess).
	end := s.Duration()
	for _, t := range s.Traffic {
		if t.End() == 0 {
			end = 0
		}
	}
	if m.Errs().Count() > trafficErrs {
		end = 0
	}
	ec.end = end
	s.Events = parseEvents(m, "events", ec)

	vitems := m.List("variants")
	if len(vitems) > MaxVariants {
		m.Errorf("variants", "%d variants given; at most %d are supported (each is a run of its own)", len(vitems), MaxVariants)
	}
	if len(vitems) == 0 {
		s.Variants = []*Variant{{Name: "tcp", Kind: KindTCP}, {Name: "mptcp", Kind: KindMPTCP}}
	}
	vseen := map[string]bool{}
	for _, it := range vitems {
		v := parseVariant(m, it, ec)
		if v == nil {
			continue
		}
		if vseen[v.Name] {
			m.ErrorAt(it.Node, it.Path, "variant name %q is used twice", v.Name)
		}
		vseen[v.Name] = true
		s.Variants = append(s.Variants, v)
	}
	for _, v := range s.Variants {
		fillVariantPaths(v, s)
		fillVariantDefaults(v, s)
	}
	checkCompetitors(m, s) // competitor.go
	s.Preferred = m.String("preferred", "")
	if s.Preferred != "" && !seen[s.Preferred] && !m.Failed("preferred") {
		m.Errorf("preferred", "%q is not a path of this scenario (paths: %s)", s.Preferred, strings.Join(pathNames(s), ", "))
	}
	parseComparisons(m, s)
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

func pathNames(s *Scenario) []string {
	var out []string
	for _, p := range s.Paths {
		out = append(out, p.Name)
	}
	return out
}

// Path returns the path with this name.
func (s *Scenario) Path(name string) *Path {
	for _, p := range s.Paths {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Variant returns the variant with this name.
func (s *Scenario) Variant(name string) *Variant {
	for _, v := range s.Variants {
		if v.Name == name {
			return v
		}
	}
	return nil
}

// Duration is how long the scenario's traffic runs: the latest end of a
// time-bound generator (0 when none is time-bound). Events do not extend
// it: a run ends with its traffic, so parsing refuses events at or after
// this time (unless a size-bound transfer leaves the end unknown).
func (s *Scenario) Duration() time.Duration {
	var d time.Duration
	for _, t := range s.Traffic {
		d = max(d, t.End())
	}
	return d
}

func (s *Scenario) String() string {
	return fmt.Sprintf("%s (%d paths, %d variants)", s.Name, len(s.Paths), len(s.Variants))
}
