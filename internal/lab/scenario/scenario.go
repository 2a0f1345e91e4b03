// Package scenario reads lab scenario files: the hosts, the paths between
// them, the traffic to run, timed events, and the variants to compare.
// Every mistake is reported with file, line and key, and what would be valid.
package scenario

import (
	"fmt"
	"mpsteer/internal/config"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// MaxPaths is the most paths a scenario may have.
const MaxPaths = 16

// MaxStreams is the most concurrent connections of one bulk transfer.
const MaxStreams = 64

// MaxCoreLinks is the most parallel links in a core given by links.
const MaxCoreLinks = 16

// MaxLinksPerPair is the most parallel links per address pair in a core
// given by links_per_pair.
const MaxLinksPerPair = 16

// MaxCoreLinksTotal is the most links a core may have in all: each gets a
// /24 of 10.200.0.0/16 (10.200.N.1 at r1, 10.200.N.2 at r2).
const MaxCoreLinksTotal = 256

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
}

// Host holds per-host settings.
type Host struct {
	Name string
	// CC is the congestion control; "" keeps the kernel's default.
	CC string
	// Rmem and Wmem are the largest TCP/MPTCP socket buffers the kernel's
	// autotuning may use (tcp_rmem/tcp_wmem max); 0 keeps the default.
	Rmem, Wmem units.Size
}

// Path is one emulated path between client and server.
type Path struct {
	Name string
	Up   linkemu.Params // client → server
	Down linkemu.Params // server → client
	// Backup makes the client's endpoint for this path a backup endpoint.
	Backup bool
	// ViaCore sends the path through the shared core (client → r1 is the
	// path's own access link).
	ViaCore bool
	// Plain is set for a via-core path given no link parameters at all:
	// its access link is a plain veth (not emulated, never the
	// bottleneck), so it has nothing to set, take down or bring up.
	Plain bool
	Line  int
}

// Core is the parallel emulated links between routers r1 and r2.
//
// With links (LinksPerPair 0) every via-core path shares M links named
// core0…core{M-1}, with ECMP over them by L4 hash. With links_per_pair,
// every ordered (client address, server address) pair of the via-core paths
// has its own M links, named c<i>x<j>-<k>: i and j are the 1-based
// positions of the client's and the server's path among the via-core
// paths, k the 0-based link of the pair.
type Core struct {
	Links        []CoreLink
	LinksPerPair int
	Line         int
	// bad is set when the number of links could not be read: link names
	// are then unknown, and events naming links are not checked.
	bad bool
}

// CoreLink is one link of the core.
type CoreLink struct {
	Name     string
	Up, Down linkemu.Params
	// With links_per_pair: the paths whose client and server addresses
	// the link joins, and its index among the pair's links.
	Client, Server string
	K              int
}

// Link returns the core link with this name.
func (c *Core) Link(name string) *CoreLink {
	if c == nil {
		return nil
	}
	for i := range c.Links {
		if c.Links[i].Name == name {
			return &c.Links[i]
		}
	}
	return nil
}

// LinkNames lists the core's links in order.
func (c *Core) LinkNames() []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.Links))
	for i, l := range c.Links {
		out[i] = l.Name
	}
	return out
}

// PairLinkName names link k of the pair (client path i, server path j),
// i and j 1-based among the via-core paths.
func PairLinkName(i, j, k int) string { return fmt.Sprintf("c%dx%d-%d", i, j, k) }

// TrafficKind names a traffic generator.
type TrafficKind string

const (
	Bulk     TrafficKind = "bulk"
	Flows    TrafficKind = "flows"
	UDPFlood TrafficKind = "udp-flood"
)

// Traffic is one generator.
type Traffic struct {
	Kind  TrafficKind
	Start time.Duration
	// Bulk: stops at Duration or after Size bytes, whichever comes first.
	Duration time.Duration
	Size     units.Size
	// Upload (client → server) or not.
	Upload bool
	// Bulk: concurrent connections (1 to MaxStreams).
	Streams int
	// Flows: sizes drawn with weights, Count flows started every Interval.
	Sizes    []units.Size
	Weights  []float64
	Count    int
	Interval time.Duration
	// UDP flood: on Path, from Start to Stop, at Rate.
	Path string
	// Pair is the client and server VM of a tenants world (default: the
	// first measured pair); AllPairs: none was given, so the traffic runs
	// between every measured pair (Pairs).
	Pair     [2]string
	AllPairs bool
	Stop     time.Duration
	Rate     units.Rate
	Line     int
}

// End is when the generator stops (0 = unknown, size-bound).
func (t Traffic) End() time.Duration {
	switch t.Kind {
	case Bulk:
		if t.Duration > 0 {
			return t.Start + t.Duration
		}
	case Flows:
		return t.Start + time.Duration(t.Count)*t.Interval
	case UDPFlood:
		return t.Stop
	}
	return 0
}

// Action is what an event does to a path.
type Action string

const (
	ActSet    Action = "set"
	ActDown   Action = "down"
	ActUp     Action = "up"
	ActRemove Action = "remove"
	// ActIfDown and ActIfUp take the client's interface of a path down
	// (carrier lost, address removed) and bring it back; ActDown and ActUp
	// are the silent kind, a blackhole the host does not see.
	ActIfDown Action = "ifdown"
	ActIfUp   Action = "ifup"
)

// Event changes a path, or core links, at a time.
type Event struct {
	At time.Duration
	// Path names the path the event changes; Links the core links it
	// changes instead, all at once (one of the two is set).
	Path   string
	Links  []string
	Action Action
	Dir    Dir
	Patch  Patch
	Line   int
}

// Dir selects link directions.
type Dir string

const (
	DirBoth Dir = "both"
	DirUp   Dir = "up"
	DirDown Dir = "down"
)

// VariantKind is plain TCP or MPTCP.
type VariantKind string

const (
	KindTCP   VariantKind = "tcp"
	KindMPTCP VariantKind = "mptcp"
)

// Variant is one way of running the scenario.
type Variant struct {
	Name string
	Kind VariantKind
	// Paths is the subset of paths built for this variant, first = initial
	// subflow (default: all; for tcp: the one named by `path`).
	Paths []string
	// Daemon configs per host ("client", "server"), as YAML to hand to
	// `mpsteer daemon --config`.
	Daemon map[string][]byte
	Events []Event
	// Spread is how the core's routers spread flows over a pair's links:
	// SpreadECMP or SpreadPinned ("" when the scenario has no core).
	Spread Spread
	// PathManager is net.mptcp.path_manager per host ("client", "server"):
	// PMKernel or PMUserspace. Both hosts are always present after parsing.
	PathManager map[string]string
	// Mptcpd names the mptcpd plugin to run in the client ("" = none);
	// it implies PathManager["client"] == PMUserspace.
	Mptcpd string
	// BestOf: a tcp variant with path: best runs over each of these paths
	// in turn and keeps the best (tcpbest.go); Paths is then the first.
	BestOf []string
	Line   int
}

// Spread is how the core's routers spread flows over the links of a pair.
type Spread string

const (
	// SpreadECMP hashes every flow's 5-tuple onto a link (collisions
	// included), as a real network's routers do.
	SpreadECMP Spread = "ecmp"
	// SpreadPinned pins each new TCP flow to the next live link of its
	// pair, round-robin (the M-fullmesh poster's SDN controller).
	SpreadPinned Spread = "pinned"
)

// Path managers (net.mptcp.path_manager).
const (
	PMKernel    = "kernel"
	PMUserspace = "userspace"
)

// MptcpdPluginDirs are where mptcpd's plugins are looked for (globs); a
// plugin a variant names must be in the first that exists. When none
// exists the name is taken as it is (the run will tell).
var MptcpdPluginDirs = []string{"/usr/lib/*-linux-gnu*/mptcpd", "/usr/lib/mptcpd", "/usr/lib64/mptcpd"}

var nameRE = regexp.MustCompile(`^[a-z][a-z0-9-]{0,14}$`)

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
	for _, it := range m.List("traffic") {
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
	parseComparisons(m, s)
	m.Done()
	if err := m.Err(); err != nil {
		return nil, err
	}
	return s, nil
}

func parseHost(hosts *yamlcfg.Map, name string) Host {
	h := Host{Name: name}
	if hosts == nil {
		return h
	}
	hm := hosts.Map(name)
	if hm == nil {
		return h
	}
	h.CC = hm.String("cc", "")
	if h.CC != "" && !regexp.MustCompile(`^[a-z0-9_]+$`).MatchString(h.CC) {
		hm.Errorf("cc", "%q is not a congestion control name (e.g. bbr, cubic, reno)", h.CC)
	}
	h.Rmem = hm.Size("rmem", 0)
	h.Wmem = hm.Size("wmem", 0)
	hm.Done()
	return h
}

func parsePath(pm *yamlcfg.Map, dir string) *Path {
	p := &Path{Line: pm.Line()}
	p.Name = pm.String("name", "")
	switch {
	case pm.Failed("name"):
	case p.Name == "":
		pm.Errorf("name", "every path needs a name")
	case !nameRE.MatchString(p.Name):
		pm.Errorf("name", "%q is not a valid path name (lower-case letters, digits and '-', starting with a letter, at most 15 characters: it names network devices)", p.Name)
	}
	p.Backup = pm.Bool("backup", false)
	via := pm.Enum("via", "", "core")
	p.ViaCore = via == "core"
	if p.ViaCore {
		p.Plain = true
		for _, k := range append(PatchKeys, "up", "down") {
			if pm.Has(k) {
				p.Plain = false
			}
		}
	}
	p.Up, p.Down = parseUpDown(pm, dir)
	pm.Done()
	return p
}

// parseUpDown reads a link's emulation: the keys that apply both ways,
// then `up:` and `down:` maps that override them per direction.
func parseUpDown(m *yamlcfg.Map, dir string) (up, down linkemu.Params) {
	up = ParsePatch(m, dir).Apply(linkemu.Params{})
	down = up
	if um := m.Map("up"); um != nil {
		up = ParsePatch(um, dir).Apply(up)
		um.Done()
	}
	if dm := m.Map("down"); dm != nil {
		down = ParsePatch(dm, dir).Apply(down)
		dm.Done()
	}
	return up, down
}

func parseCore(c *yamlcfg.Map, dir string, via []string) *Core {
	core := &Core{Line: c.Line()}
	hasLinks, hasPerPair := c.Has("links"), c.Has("links_per_pair")
	n := 0
	switch {
	case hasLinks && hasPerPair:
		c.Errorf("links_per_pair", "give either links (M links shared by every via-core path) or links_per_pair (M links for every client/server address pair), not both")
	case hasPerPair:
		core.LinksPerPair = c.Int("links_per_pair", 0, 1, MaxLinksPerPair)
		pairs := len(via) * len(via)
		switch {
		case c.Failed("links_per_pair"):
		case pairs == 0:
			c.Errorf("links_per_pair", "no path is via core, so a core of links per address pair would have no links (give some paths via: core)")
		case pairs*core.LinksPerPair > MaxCoreLinksTotal:
			c.Errorf("links_per_pair", "%d links for each of %d (client, server) address pairs (%d via-core paths) make %d core links; the core's addressing (a /24 of 10.200.0.0/16 per link) allows at most %d",
				core.LinksPerPair, pairs, len(via), pairs*core.LinksPerPair, MaxCoreLinksTotal)
			core.LinksPerPair = 0
		}
	case hasLinks:
		n = c.Int("links", 0, 1, MaxCoreLinks)
	default:
		c.Errorf("links", "a core needs links (the number of parallel links shared by every via-core path, 1 to %d) or links_per_pair (the number of links for every client/server address pair, 1 to %d)", MaxCoreLinks, MaxLinksPerPair)
	}
	def := ParsePatch(c, dir).Apply(linkemu.Params{})
	for i := 0; i < n; i++ {
		core.Links = append(core.Links, CoreLink{Name: fmt.Sprintf("core%d", i), Up: def, Down: def})
	}
	if m := core.LinksPerPair; m > 0 {
		for i, cp := range via {
			for j, sp := range via {
				for k := 0; k < m; k++ {
					core.Links = append(core.Links, CoreLink{Name: PairLinkName(i+1, j+1, k), Up: def, Down: def, Client: cp, Server: sp, K: k})
				}
			}
		}
	}
	// Per-link overrides: overrides: [{link: 2, rate: 10mbit}, …], or by
	// name with links_per_pair: [{link: c1x2-0, rate: 10mbit}].
	for _, it := range c.List("overrides") {
		if it.Map == nil {
			c.ErrorAt(it.Node, it.Path, "an override is a mapping such as {link: 1, rate: 10mbit}")
			continue
		}
		i := -1
		switch {
		case core.LinksPerPair > 0:
			name := it.Map.String("link", "")
			switch {
			case it.Map.Failed("link"):
			case name == "":
				it.Map.Errorf("link", "an override needs the link it changes (link: NAME, e.g. link: %s)", core.Links[0].Name)
			default:
				for k, l := range core.Links {
					if l.Name == name {
						i = k
					}
				}
				if i < 0 {
					it.Map.Errorf("link", "%q is not a core link (core links: %s)", name, strings.Join(core.LinkNames(), ", "))
				}
			}
		case n > 0:
			i = it.Map.Int("link", -1, 0, n-1)
			if i < 0 && !it.Map.Failed("link") {
				it.Map.Errorf("link", "an override needs the link it changes (link: 0 to %d)", n-1)
			}
		default:
			it.Map.Has("link") // the core's links are reported already
		}
		patch := ParsePatch(it.Map, dir)
		it.Map.Done()
		if i >= 0 && i < len(core.Links) {
			core.Links[i].Up = patch.Apply(core.Links[i].Up)
			core.Links[i].Down = patch.Apply(core.Links[i].Down)
		}
	}
	core.bad = c.Failed("links") || c.Failed("links_per_pair") || len(core.Links) == 0
	c.Done()
	return core
}

// Patch is a partial change of link parameters: what a path definition,
// an event or `lab set` says. Nil fields are left alone.
type Patch struct {
	Rate         *units.Rate
	Trace        *linkemu.Trace
	ClearTrace   bool
	Delay        *time.Duration
	Jitter       *time.Duration
	Loss         *units.Fraction
	QueueBytes   *units.Size
	QueuePackets *int
	Outages      []linkemu.Outage
	SetOutages   bool
}

// Keys that a link accepts.
var PatchKeys = []string{"rate", "trace", "delay", "jitter", "loss", "queue", "outage"}

// ParsePatch reads the link keys present in m (others are left for the
// caller). Trace files are resolved relative to dir.
func ParsePatch(m *yamlcfg.Map, dir string) Patch {
	var p Patch
	if m.Has("rate") {
		r := m.Rate("rate", 0)
		if r == 0 && !m.Failed("rate") {
			m.Errorf("rate", "must be above 0bit (leave rate out for an unlimited link)")
		}
		p.Rate = &r
		p.ClearTrace = true
	}
	if m.Has("trace") {
		f := m.String("trace", "")
		switch {
		case m.Failed("trace"):
		case f == "":
			m.Errorf("trace", "a trace needs the name of a trace file")
		default:
			if !filepath.IsAbs(f) {
				f = filepath.Join(dir, f)
			}
			tr, err := linkemu.ReadTrace(f)
			if err != nil {
				if os.IsNotExist(unwrapPath(err)) {
					m.Errorf("trace", "trace file %s does not exist", f)
				} else {
					m.Errorf("trace", "%v", err)
				}
			} else {
				p.Trace = tr
			}
		}
		if p.Rate != nil {
			m.Errorf("trace", "give either rate or trace, not both")
		}
	}
	if m.Has("delay") {
		d := m.Duration("delay", 0)
		p.Delay = &d
	}
	if m.Has("jitter") {
		d := m.Duration("jitter", 0)
		p.Jitter = &d
	}
	if m.Has("loss") {
		f := m.Fraction("loss", 0)
		p.Loss = &f
	}
	if m.Has("queue") {
		s := m.String("queue", "")
		if m.Failed("queue") {
			// Reported already.
		} else if n, ok := parsePackets(s); ok {
			if n <= 0 {
				m.Errorf("queue", "must hold at least 1 packet")
			}
			p.QueuePackets = &n
			zero := units.Size(0)
			p.QueueBytes = &zero
		} else {
			b, err := units.ParseSize(s)
			if err != nil {
				m.Errorf("queue", "%q is not a queue size (write bytes such as 64KiB or packets such as 100pkt)", s)
			} else if b < 1500 {
				m.Errorf("queue", "%s cannot hold one full-size packet (1500B)", b)
			}
			p.QueueBytes = &b
		}
	}
	if m.Has("outage") {
		p.SetOutages = true
		for _, it := range m.List("outage") {
			if it.Map == nil {
				m.ErrorAt(it.Node, it.Path, "an outage is a mapping such as {at: 5s, for: 5s, every: 10s}")
				continue
			}
			o := linkemu.Outage{
				At:    it.Map.Duration("at", 0),
				For:   it.Map.Duration("for", 0),
				Every: it.Map.Duration("every", 0),
			}
			if o.For <= 0 && !it.Map.Failed("for") {
				it.Map.Errorf("for", "an outage needs a length above 0s")
			}
			if o.Every > 0 && o.Every <= o.For {
				it.Map.Errorf("every", "%v is not longer than the outage itself (%v)", o.Every, o.For)
			}
			it.Map.Done()
			p.Outages = append(p.Outages, o)
		}
	}
	return p
}

func unwrapPath(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func parsePackets(s string) (int, bool) {
	for _, suf := range []string{"packets", "packet", "pkts", "pkt", "p"} {
		if strings.HasSuffix(s, suf) {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(s, suf)))
			if err != nil {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// Apply returns p changed by the patch.
func (pt Patch) Apply(p linkemu.Params) linkemu.Params {
	if pt.Rate != nil {
		p.Rate = *pt.Rate
	}
	if pt.ClearTrace {
		p.Trace = nil
	}
	if pt.Trace != nil {
		p.Trace = pt.Trace
		p.Rate = 0
	}
	if pt.Delay != nil {
		p.Delay = *pt.Delay
	}
	if pt.Jitter != nil {
		p.Jitter = *pt.Jitter
	}
	if pt.Loss != nil {
		p.Loss = *pt.Loss
	}
	if pt.QueueBytes != nil {
		p.QueueBytes = *pt.QueueBytes
	}
	if pt.QueuePackets != nil {
		p.QueuePackets = *pt.QueuePackets
	}
	if pt.SetOutages {
		p.Outages = pt.Outages
	}
	return p
}

// Empty reports whether the patch changes nothing.
func (pt Patch) Empty() bool {
	return pt.Rate == nil && pt.Trace == nil && pt.Delay == nil && pt.Jitter == nil &&
		pt.Loss == nil && pt.QueueBytes == nil && pt.QueuePackets == nil && !pt.SetOutages
}

func parseTraffic(t *yamlcfg.Map, paths map[string]bool, tn *Tenants) Traffic {
	tr := Traffic{Line: t.Line()}
	tr.Pair = parsePair(t, tn)
	tr.AllPairs = tn != nil && !t.Has("pair")
	tr.Kind = TrafficKind(t.Enum("type", "", string(Bulk), string(Flows), string(UDPFlood)))
	if tr.Kind == "" && !t.Has("type") {
		t.Errorf("type", "every traffic entry needs a type (valid: bulk, flows, udp-flood)")
	}
	tr.Start = t.Duration("start", 0)
	switch tr.Kind {
	case Bulk:
		tr.Duration = t.Duration("duration", 0)
		tr.Size = t.Size("size", 0)
		if tr.Duration == 0 && tr.Size == 0 && !t.Failed("duration") && !t.Failed("size") {
			t.Errorf("duration", "a bulk transfer needs a duration, a size, or both (it stops at the first reached)")
		}
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
		tr.Streams = t.Int("streams", 1, 1, MaxStreams)
	case Flows:
		for _, s := range t.Strings("sizes") {
			sz, err := units.ParseSize(s)
			if err != nil {
				t.Errorf("sizes", "%v", err)
				continue
			}
			if sz <= 0 {
				t.Errorf("sizes", "flow sizes must be above 0B")
			}
			tr.Sizes = append(tr.Sizes, sz)
		}
		if len(tr.Sizes) == 0 && !t.Failed("sizes") {
			t.Errorf("sizes", "short flows need a list of sizes, e.g. [10KiB, 100KiB, 1MiB]")
		}
		for _, w := range t.Strings("weights") {
			f, err := strconv.ParseFloat(w, 64)
			if err != nil || f < 0 {
				t.Errorf("weights", "%q is not a weight (a number 0 or above)", w)
			}
			tr.Weights = append(tr.Weights, f)
		}
		if len(tr.Weights) > 0 && len(tr.Weights) != len(tr.Sizes) {
			t.Errorf("weights", "%d weights for %d sizes", len(tr.Weights), len(tr.Sizes))
		}
		tr.Count = t.Int("count", 10, 1, 1000000)
		tr.Interval = t.Duration("interval", 100*time.Millisecond)
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
	case UDPFlood:
		tr.Path = t.String("path", "")
		switch {
		case t.Failed("path"):
		case tn != nil:
			if tr.Path != "" {
				t.Errorf("path", "a tenants world has no paths: a flood runs between a VM pair (pair: [vm3, vm4], default the measured pair)")
			}
		case tr.Path == "":
			t.Errorf("path", "a UDP flood needs the path it floods (path: NAME)")
		case !paths[tr.Path]:
			t.Errorf("path", "%q is not a path of this scenario", tr.Path)
		}
		tr.Start = t.Duration("from", tr.Start)
		tr.Stop = t.Duration("to", 0)
		if tr.Stop <= tr.Start && !t.Failed("to") && !t.Failed("from") && !t.Failed("start") {
			t.Errorf("to", "the flood must end (to) after it starts (from)")
		}
		tr.Rate = t.Rate("rate", 0)
		if tr.Rate == 0 && !t.Failed("rate") {
			t.Errorf("rate", "a UDP flood needs a rate, e.g. 400mbit")
		}
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
	}
	if tr.Kind != "" {
		// Without a valid type, which keys are valid is unknown: the type's
		// own error is the one to fix first.
		t.Done()
	}
	return tr
}

// eventContext is what events are checked against.
type eventContext struct {
	paths      map[string]bool // every path
	plain      map[string]bool // via-core paths built as plain veths
	core       *Core
	coreFailed bool // the core was given but its links are unknown
	dir        string
	// end is when the traffic ends (0 when unknown).
	end time.Duration
	// tenants is the tenants world (nil: paths); daemonHosts the hosts a
	// variant's daemon: may name.
	tenants     *Tenants
	daemonHosts []string
	// s is the scenario as parsed so far (paths, core, traffic, events).
	s *Scenario
}

// parseEvents reads the events under key. An event at or after the time
// the traffic ends would never run and is refused.
func parseEvents(m *yamlcfg.Map, key string, ec *eventContext) []Event {
	var out []Event
	for _, it := range m.List(key) {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "an event is a mapping such as {at: 5s, path: bad, action: remove}")
			continue
		}
		e := it.Map
		ev := Event{Line: e.Line()}
		ev.At = e.Duration("at", 0)
		switch {
		case !e.Has("at"):
			e.Errorf("at", "every event needs a time (at: 5s)")
		case e.Failed("at"):
		case ec.end > 0 && ev.At >= ec.end:
			e.Errorf("at", "%v is not before the traffic ends (at %v): the event would never run", ev.At, ec.end)
		}
		hasPath, hasLink := e.Has("path"), e.Has("link")
		ev.Path = e.String("path", "")
		switch {
		case e.Failed("path"):
		case hasPath && hasLink:
			e.Errorf("link", "give either path (a path) or link (core links), not both")
		case !hasPath && !hasLink:
			e.Errorf("path", "every event needs the path it changes (path: NAME) or the core links it changes (link: NAME or a list)")
		case !hasPath:
		case ec.tenants != nil:
			e.Errorf("path", "a tenants world has no paths; name its links instead (link: %s)", strings.Join(ec.core.LinkNames(), ", "))
		case !ec.paths[ev.Path]:
			e.Errorf("path", "%q is not a path of this scenario", ev.Path)
		case ec.plain[ev.Path]:
			e.Errorf("path", "path %q is via core without link parameters, so its access link is a plain veth with nothing to change; give the path link parameters (e.g. rate) to make it an emulated link, or name core links (link: NAME)", ev.Path)
		}
		if hasLink && !hasPath {
			ev.Links = e.Strings("link")
			seen := map[string]bool{}
			switch {
			case e.Failed("link"):
			case len(ev.Links) == 0:
				e.Errorf("link", "name at least one core link (link: NAME or link: [NAME, …])")
			case ec.core == nil:
				if !ec.coreFailed {
					e.Errorf("link", "the scenario has no core, so there are no core links to change")
				}
			case ec.coreFailed:
			default:
				for _, l := range ev.Links {
					if ec.core.Link(l) == nil {
						e.Errorf("link", "%q is not a core link (core links: %s)", l, strings.Join(ec.core.LinkNames(), ", "))
						break
					}
					if seen[l] {
						e.Errorf("link", "core link %q is named twice", l)
						break
					}
					seen[l] = true
				}
			}
		}
		ev.Action = Action(e.Enum("action", "", string(ActSet), string(ActDown), string(ActUp), string(ActRemove), string(ActIfDown), string(ActIfUp)))
		ev.Dir = Dir(e.Enum("dir", string(DirBoth), string(DirBoth), string(DirUp), string(DirDown)))
		hasSet := e.Has("set")
		set := e.Map("set")
		if set != nil {
			ev.Patch = ParsePatch(set, ec.dir)
		}
		if hasSet && ev.Action == "" && !e.Failed("action") {
			ev.Action = ActSet
		}
		switch {
		case e.Failed("action"), e.Failed("set"):
			// Reported already.
		case ev.Action == "":
			e.Errorf("action", "every event needs an action (valid: set, down, up, remove, ifdown, ifup)")
		case ev.Action == ActSet && (set == nil || len(set.Keys()) == 0):
			e.Errorf("set", "a set event needs the keys to change, e.g. set: {rate: 10mbit}")
		case ev.Action == ActRemove && hasLink && !hasPath:
			e.Errorf("action", "remove takes a path away (its link and endpoint); core links have no endpoint: take them down (valid for links: set, down, up)")
		case (ev.Action == ActIfDown || ev.Action == ActIfUp) && hasLink && !hasPath:
			e.Errorf("action", "%s acts on the client's interface of a path; core links have none: take them down or up (valid for links: set, down, up)", ev.Action)
		}
		set.Done()
		e.Done()
		out = append(out, ev)
	}
	return out
}

func parseVariant(m *yamlcfg.Map, it yamlcfg.Item, ec *eventContext) *Variant {
	paths := ec.paths
	v := &Variant{Line: it.Node.Line}
	if it.Map == nil {
		// Short form: "tcp" or "mptcp".
		switch it.Scalar {
		case "tcp":
			v.Name, v.Kind = "tcp", KindTCP
		case "mptcp":
			v.Name, v.Kind = "mptcp", KindMPTCP
		default:
			m.ErrorAt(it.Node, it.Path, "%q: a variant given by name alone must be tcp or mptcp; others need a mapping with name and kind", it.Scalar)
			return nil
		}
		return v
	}
	vm := it.Map
	v.Name = vm.String("name", "")
	if vm.Failed("name") {
		// Reported already.
	} else if v.Name == "" {
		vm.Errorf("name", "every variant needs a name")
	} else if !regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._-]*$`).MatchString(v.Name) {
		vm.Errorf("name", "%q is not a valid variant name (letters, digits, '+', '.', '_', '-'; it names a directory)", v.Name)
	}
	def := string(KindMPTCP)
	if v.Name == "tcp" || v.Name == TCPBest {
		def = string(KindTCP)
	}
	v.Kind = VariantKind(vm.Enum("kind", def, string(KindTCP), string(KindMPTCP)))
	if ec.tenants != nil {
		for _, k := range []string{"path", "paths"} {
			if vm.Has(k) {
				vm.Errorf(k, "a tenants world has no paths: the variant runs between the measured VM pair")
			}
		}
	}
	if p := vm.String("path", ""); p != "" {
		if !paths[p] && !(p == BestPath && v.Kind == KindTCP) {
			vm.Errorf("path", "%q is not a path of this scenario", p)
		}
		v.Paths = []string{p}
	}
	if vm.Has("paths") {
		if v.Paths != nil {
			vm.Errorf("paths", "give either path or paths, not both")
		}
		for _, p := range vm.Strings("paths") {
			if !paths[p] {
				vm.Errorf("paths", "%q is not a path of this scenario", p)
			}
			v.Paths = append(v.Paths, p)
		}
	}
	if v.Kind == KindTCP && len(v.Paths) > 1 {
		vm.Errorf("paths", "a tcp variant runs over one path")
	}
	if d := vm.Map("daemon"); d != nil {
		v.Daemon = map[string][]byte{}
		for _, host := range ec.daemonHosts {
			if !d.Has(host) {
				continue
			}
			hm := d.Map(host)
			if hm == nil {
				continue
			}
			// A scenario with a bad policy is rejected when it is loaded,
			// not halfway through a run.
			config.Check(hm)
			node := nodeOf(d, host)
			data, err := yaml.Marshal(node)
			if err != nil {
				d.Errorf(host, "cannot re-encode the daemon config: %v", err)
			}
			v.Daemon[host] = data
		}
		d.Done()
	}
	v.Events = parseEvents(vm, "events", ec)
	parseVariantPM(vm, v, ec)
	parseTCPBest(vm, v, ec)
	vm.Done()
	return v
}

var pluginRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]*$`)

// parseVariantPM reads spread, path_manager and mptcpd.
func parseVariantPM(vm *yamlcfg.Map, v *Variant, ec *eventContext) {
	if vm.Has("spread") {
		v.Spread = Spread(vm.Enum("spread", "", string(SpreadECMP), string(SpreadPinned)))
		switch {
		case vm.Failed("spread"):
		case ec.tenants != nil && v.Spread != SpreadECMP:
			vm.Errorf("spread", "spread says how a core's routers spread flows; in a tenants world the hypervisors route: spread: ecmp gives each a default route over every link (L4 hash), and pinning each subflow to a link is the daemon's spread policy (daemon: {%s: {policies: [{name: spread, ...}]}})", ec.tenants.Hypervisors[0])
		case ec.tenants != nil:
		case ec.core == nil:
			if !ec.coreFailed {
				vm.Errorf("spread", "spread says how the core's routers spread flows over its links, but the scenario has no core")
			}
		case v.Spread == SpreadPinned && ec.core.LinksPerPair == 0 && !ec.coreFailed:
			vm.Errorf("spread", "pinned needs a core with links per address pair (core: {links_per_pair: M}); a core of shared links (links: M) is spread by ECMP only")
		}
	}
	explicit := map[string]bool{}
	if vm.Has("path_manager") {
		v.PathManager = map[string]string{}
		node := yamlcfg.RawNode(vm, "path_manager")
		switch node.Kind {
		case yaml.MappingNode:
			hm := vm.Map("path_manager")
			for _, host := range []string{"client", "server"} {
				if hm.Has(host) {
					if pm := hm.Enum(host, "", PMKernel, PMUserspace); pm != "" {
						v.PathManager[host] = pm
						explicit[host] = true
					}
				}
			}
			if len(hm.Keys()) == 0 {
				vm.Errorf("path_manager", "name a path manager for client, server or both, e.g. path_manager: {client: userspace}")
			}
			hm.Done()
		default:
			if pm := vm.Enum("path_manager", "", PMKernel, PMUserspace); pm != "" {
				v.PathManager["client"], v.PathManager["server"] = pm, pm
				explicit["client"], explicit["server"] = true, true
			}
		}
		if v.Kind == KindTCP && !vm.Failed("path_manager") {
			vm.Errorf("path_manager", "a tcp variant does not use MPTCP, so it has no path manager (give kind: mptcp)")
		}
	}
	if vm.Has("mptcpd") {
		v.Mptcpd = vm.String("mptcpd", "")
		switch {
		case vm.Failed("mptcpd"):
		case v.Mptcpd == "":
			vm.Errorf("mptcpd", "name the mptcpd plugin to load, e.g. mptcpd: sspi")
		case !pluginRE.MatchString(v.Mptcpd):
			vm.Errorf("mptcpd", "%q is not a plugin name (lower-case letters, digits, '_' and '-', e.g. sspi or addr_adv)", v.Mptcpd)
		case v.Kind == KindTCP:
			vm.Errorf("mptcpd", "a tcp variant does not use MPTCP; mptcpd needs kind: mptcp")
		case explicit["client"] && v.PathManager["client"] != PMUserspace:
			vm.Errorf("mptcpd", "mptcpd is a userspace path manager, but the client's path_manager is %s (leave it out or make it userspace)", v.PathManager["client"])
		default:
			if avail, dir, ok := mptcpdPlugins(); ok && !slices.Contains(avail, v.Mptcpd) {
				vm.Errorf("mptcpd", "mptcpd has no plugin %q in %s (plugins: %s)", v.Mptcpd, dir, strings.Join(avail, ", "))
			}
		}
	}
}

// mptcpdPlugins lists the plugins in the first plugin directory found.
func mptcpdPlugins() (names []string, dir string, ok bool) {
	for _, pat := range MptcpdPluginDirs {
		dirs, _ := filepath.Glob(pat)
		for _, d := range dirs {
			ents, err := os.ReadDir(d)
			if err != nil {
				continue
			}
			for _, e := range ents {
				if n, found := strings.CutSuffix(e.Name(), ".so"); found {
					names = append(names, n)
				}
			}
			return names, d, true
		}
	}
	return nil, "", false
}

// fillVariantDefaults gives every variant its spread and both hosts' path
// managers.
func fillVariantDefaults(v *Variant, s *Scenario) {
	if v.Spread == "" && s.Core != nil && s.Tenants == nil {
		v.Spread = SpreadECMP
	}
	if v.PathManager == nil {
		v.PathManager = map[string]string{}
	}
	for _, h := range []string{"client", "server"} {
		if v.PathManager[h] == "" {
			v.PathManager[h] = PMKernel
		}
	}
	if v.Mptcpd != "" {
		v.PathManager["client"] = PMUserspace
	}
}

// nodeOf digs out the raw node under key so that a daemon config can be
// handed on verbatim.
func nodeOf(m *yamlcfg.Map, key string) *yaml.Node {
	raw := yamlcfg.RawNode(m, key)
	if raw == nil {
		return &yaml.Node{Kind: yaml.MappingNode}
	}
	return raw
}

func fillVariantPaths(v *Variant, s *Scenario) {
	if len(v.Paths) > 0 {
		return
	}
	if v.Kind == KindTCP {
		if len(s.Paths) > 0 {
			v.Paths = []string{s.Paths[0].Name}
		}
		return
	}
	for _, p := range s.Paths {
		v.Paths = append(v.Paths, p.Name)
	}
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
