package scenario

import (
	"mpsteer/internal/config"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/yamlcfg"
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
	} else if !variantNameRE.MatchString(v.Name) {
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

var variantNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9+._-]*$`)

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
			if avail, dir, ok := ec.mptcpdPlugins(); ok && !slices.Contains(avail, v.Mptcpd) {
				vm.Errorf("mptcpd", "mptcpd has no plugin %q in %s (plugins: %s)", v.Mptcpd, dir, strings.Join(avail, ", "))
			}
		}
	}
}

// mptcpdPlugins lists mptcpd's plugins, looked up once per scenario
// (each lookup globs and reads directories).
func (ec *eventContext) mptcpdPlugins() (names []string, dir string, ok bool) {
	if ec.plugins == nil {
		p := &pluginList{}
		p.names, p.dir, p.ok = mptcpdPlugins()
		ec.plugins = p
	}
	return ec.plugins.names, ec.plugins.dir, ec.plugins.ok
}

// pluginList is what mptcpdPlugins found.
type pluginList struct {
	names []string
	dir   string
	ok    bool
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
