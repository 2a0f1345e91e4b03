// Package world builds and removes a lab world: network namespaces for the
// hosts, emulated links (TUN pairs driven by `mpsteer lab emulate`),
// addresses, routes and the MPTCP path-manager configuration.
package world

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/pm"
)

// Host roles.
const (
	Client = "client"
	Server = "server"
	R1     = "r1"
	R2     = "r2"
)

// MaxEndpoints is the kernel's limit on path-manager endpoints (and on
// each limit), MPTCP_PM_ADDR_MAX in net/mptcp/pm_kernel.c.
const MaxEndpoints = 8

// End is one side of a link.
type End struct {
	Host string       `json:"host"`
	Dev  string       `json:"dev"`
	Addr netip.Prefix `json:"addr"` // none (invalid) for a bridge port
	// Master is the bridge the device is a port of ("" = none).
	Master string `json:"master,omitempty"`
}

// LinkPlan is one emulated link (a TUN device at each end).
type LinkPlan struct {
	Name string         `json:"name"`
	A    End            `json:"a"` // "up" flows from A to B
	B    End            `json:"b"`
	Up   linkemu.Params `json:"up"`
	Down linkemu.Params `json:"down"`
}

// VethPlan is a plain (not emulated) link.
type VethPlan struct {
	A End `json:"a"`
	B End `json:"b"`
}

// PathInfo is what scripts need to know about one path.
type PathInfo struct {
	Name   string  `json:"name"`
	Index  int     `json:"index"` // 1-based position in the scenario
	Client PathEnd `json:"client"`
	Server PathEnd `json:"server"`
	// Link is the emulated link carrying the access part; "" when the
	// access link is a plain veth (Veth).
	Link    string `json:"link"`
	Veth    bool   `json:"veth,omitempty"`
	Backup  bool   `json:"backup"`
	ViaCore bool   `json:"via_core"`
	// Endpoint is the client's endpoint for this path under the kernel
	// path manager (nil: none).
	Endpoint *pm.Flags `json:"-"`
	EPFlags  string    `json:"endpoint_flags,omitempty"`
	// ServerEndpoint is the server's endpoint for its address of this
	// path (a signal endpoint: the server announces it), nil when none.
	ServerEndpoint *pm.Flags  `json:"-"`
	ServerEPFlags  string     `json:"server_endpoint_flags,omitempty"`
	Table          int        `json:"table"`
	Up             PathParams `json:"up"`
	Down           PathParams `json:"down"`
}

// CoreLinkInfo is one core link as built: its devices in r1 and r2 carry
// its name. With links per pair it belongs to one (client address, server
// address) pair.
type CoreLinkInfo struct {
	Name string `json:"name"`
	// ID is the link's position among the scenario's core links: it
	// numbers its addresses (10.200.ID.1 at r1, .2 at r2) and, with
	// pinned spread, its mark (MarkBase+ID) and routing table.
	ID         int        `json:"id"`
	ClientPath string     `json:"client_path,omitempty"`
	ServerPath string     `json:"server_path,omitempty"`
	ClientAddr netip.Addr `json:"client_addr,omitzero"`
	ServerAddr netip.Addr `json:"server_addr,omitzero"`
	K          int        `json:"k"`
	// Mark is the packet mark that routes a pinned flow over this link
	// (pinned spread only).
	Mark  uint32 `json:"mark,omitempty"`
	Table int    `json:"table,omitempty"`
}

// PathEnd names a device and address of a path at one host.
type PathEnd struct {
	Dev  string     `json:"dev"`
	Addr netip.Addr `json:"addr"`
}

// PathParams is a printable copy of link parameters.
type PathParams struct {
	Rate   string `json:"rate"`
	Delay  string `json:"delay"`
	Loss   string `json:"loss"`
	Queue  string `json:"queue"`
	Jitter string `json:"jitter,omitempty"`
	Trace  string `json:"trace,omitempty"`
}

// Route is one route a host needs.
type Route struct {
	Host  string       `json:"host"`
	Dst   netip.Prefix `json:"dst"`
	Devs  []string     `json:"devs"` // several = ECMP
	Table int          `json:"table,omitempty"`
	Src   netip.Addr   `json:"src,omitempty"`
	Via   netip.Addr   `json:"via,omitempty"`
}

// Rule is a policy rule: packets from From (when set), to To (when set)
// and carrying Mark (when set) are routed by Table.
type Rule struct {
	Host  string       `json:"host"`
	From  netip.Addr   `json:"from,omitzero"`
	To    netip.Prefix `json:"to,omitzero"`
	Mark  uint32       `json:"mark,omitempty"`
	Table int          `json:"table"`
	// Priority orders the rules (default: the table's number).
	Priority int `json:"priority,omitempty"`
}

func (r Rule) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "rule")
	if r.From.IsValid() {
		fmt.Fprintf(&b, " from %s", r.From)
	}
	if r.To.IsValid() {
		fmt.Fprintf(&b, " to %s", r.To)
	}
	if r.Mark != 0 {
		fmt.Fprintf(&b, " fwmark %#x", r.Mark)
	}
	fmt.Fprintf(&b, " table %d", r.Table)
	return b.String()
}

// HostPlan is one namespace.
type HostPlan struct {
	Role    string            `json:"role"`
	NetNS   string            `json:"netns"`
	Sysctls map[string]string `json:"sysctls"`
	CC      string            `json:"cc,omitempty"`
	// PathManager is net.mptcp.path_manager (client and server only).
	PathManager string `json:"path_manager,omitempty"`
}

// Plan is the whole world, computed before anything is built.
type Plan struct {
	Name     string     `json:"name"`
	Scenario string     `json:"scenario"`
	Variant  string     `json:"variant"`
	Kind     string     `json:"kind"`
	Seed     uint64     `json:"seed"`
	Hosts    []HostPlan `json:"hosts"`
	Links    []LinkPlan `json:"links"`
	Veths    []VethPlan `json:"veths"`
	Routes   []Route    `json:"routes"`
	Rules    []Rule     `json:"rules"`
	Paths    []PathInfo `json:"paths"`
	// Limits are the path-manager limits of both hosts.
	Limits pm.Limits `json:"limits"`
	// SpareJoin: both hosts allow one join more than Limits says, as the
	// kernel's default limits (2) do for two paths. A daemon on a client
	// run by the kernel path manager may re-add an endpoint (prefer's
	// fast return): when that is the address of the connection's initial
	// subflow, the fresh subflow is a join both hosts count while the
	// path's old one (the initial subflow, not a join) frees none. The
	// client's kernel path manager opens no more subflows for it: one
	// per endpoint.
	SpareJoin bool `json:"spare_join,omitempty"`
	// Spread is how r1 and r2 spread flows over the core ("" without a
	// core): ecmp (L4 hash) or pinned (round-robin per pair, BPF).
	Spread scenario.Spread `json:"spread,omitempty"`
	// CoreLinks are the core's links that this world builds.
	CoreLinks []CoreLinkInfo `json:"core_links,omitempty"`
	// Mptcpd is the mptcpd plugin the variant runs in the client ("" =
	// none); the runner starts it.
	Mptcpd string `json:"mptcpd,omitempty"`
	// Tenants describes a multi-tenant world (tenants.go); Bridges are its
	// hypervisors' bridges, Endpoints its VMs' kernel path-manager
	// endpoints.
	Tenants   *TenantsInfo   `json:"tenants,omitempty"`
	Bridges   []BridgePlan   `json:"bridges,omitempty"`
	Endpoints []EndpointPlan `json:"endpoints,omitempty"`
	// Round is the run's round (from 1; 0 outside lab run): with Seed it
	// draws the outages' jitter.
	Round int `json:"round,omitempty"`
}

// MarkBase is the first packet mark of pinned core links: link ID n is
// MarkBase+n, routed by table MarkTableBase+n in r1 and r2.
const (
	MarkBase      = 0x100
	MarkTableBase = 2000
	markRulePrio  = 500
	// pairTableBase+(P-1)*16+(Q-1) routes, at r1 and r2, the pair of
	// client path P and server path Q (scenario positions) over its links.
	pairTableBase = 1000
)

var labNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// ValidName checks a lab name.
func ValidName(name string) error {
	if !labNameRE.MatchString(name) {
		return fmt.Errorf("lab name %q is not valid (lower-case letters, digits and '-', at most 32 characters)", name)
	}
	return nil
}

// NetNS is the namespace name of a host in lab name.
func NetNS(name, host string) string { return "mps-" + name + "-" + host }

// NSPrefix is the prefix of every lab namespace.
const NSPrefix = "mps-"

// addresses: path i (1-based): client 10.i.0.1, server 10.i.0.2 (direct) or,
// via the core, r1 10.i.0.254, server 10.(100+i).0.2 behind r2
// 10.(100+i).0.254; core link k (its position among the scenario's core
// links, at most 256): r1 10.200.k.1, r2 10.200.k.2.
func pfx(a, b, c, d byte, bits int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b, c, d}), bits)
}

// hostPlan is one host's namespace and sysctls: h gives an end host's
// congestion control and socket buffers, pathManager its path manager
// (nil and "" for a router).
func hostPlan(lab, role string, h *scenario.Host, pathManager string) HostPlan {
	hp := HostPlan{Role: role, NetNS: NetNS(lab, role), Sysctls: map[string]string{
		"net.mptcp.enabled":                  "1",
		"net.ipv4.conf.all.rp_filter":        "0",
		"net.ipv4.conf.default.rp_filter":    "0",
		"net.ipv6.conf.all.disable_ipv6":     "1",
		"net.ipv6.conf.default.disable_ipv6": "1",
	}}
	if h != nil {
		if h.CC != "" {
			hp.Sysctls["net.ipv4.tcp_congestion_control"] = h.CC
			hp.CC = h.CC
		}
		if h.Rmem > 0 {
			hp.Sysctls["net.ipv4.tcp_rmem"] = fmt.Sprintf("4096 131072 %d", int64(h.Rmem))
		}
		if h.Wmem > 0 {
			hp.Sysctls["net.ipv4.tcp_wmem"] = fmt.Sprintf("4096 16384 %d", int64(h.Wmem))
		}
	}
	hp.PathManager = pathManager
	// A fresh namespace starts with the kernel path manager; only a
	// change is written (kernels before 6.15 lack this sysctl).
	if pathManager != "" && pathManager != scenario.PMKernel {
		hp.Sysctls["net.mptcp.path_manager"] = pathManager
	}
	return hp
}

// NewPlan lays out the world for one variant of a scenario.
func NewPlan(name string, s *scenario.Scenario, v *scenario.Variant) (*Plan, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	if s.Tenants != nil {
		return newTenantsPlan(name, s, v)
	}
	p := &Plan{Name: name, Scenario: s.File, Variant: v.Name, Kind: string(v.Kind), Seed: s.Seed, Mptcpd: v.Mptcpd}
	if v.Kind == scenario.KindMPTCP && len(v.Paths) > MaxEndpoints+1 {
		return nil, fmt.Errorf("variant %s uses %d paths, but the kernel's path manager takes at most %d endpoints (%d paths)", v.Name, len(v.Paths), MaxEndpoints, MaxEndpoints+1)
	}
	useCore := false
	inVariant := map[string]bool{}
	for _, pn := range v.Paths {
		if s.Path(pn) == nil {
			return nil, fmt.Errorf("variant %s: scenario %s has no path %q", v.Name, s.Name, pn)
		}
		inVariant[pn] = true
		if s.Path(pn).ViaCore {
			useCore = true
		}
	}
	if useCore && s.Core == nil {
		return nil, fmt.Errorf("variant %s: paths via core, but the scenario has no core", v.Name)
	}
	if s.Core != nil {
		p.Spread = v.Spread
		if p.Spread == "" {
			p.Spread = scenario.SpreadECMP
		}
		if p.Spread == scenario.SpreadPinned && s.Core.LinksPerPair == 0 {
			return nil, fmt.Errorf("variant %s: pinned spread needs a core with links_per_pair", v.Name)
		}
	}
	pmOf := func(host string) string {
		if v.PathManager[host] == scenario.PMUserspace || (host == Client && v.Mptcpd != "") {
			return scenario.PMUserspace
		}
		return scenario.PMKernel
	}
	host := func(role string, h *scenario.Host) HostPlan {
		pm := ""
		if h != nil {
			pm = pmOf(role)
		}
		return hostPlan(name, role, h, pm)
	}
	p.Hosts = append(p.Hosts, host(Client, &s.Client), host(Server, &s.Server))
	if useCore {
		for _, r := range []string{R1, R2} {
			hp := host(r, nil)
			hp.Sysctls["net.ipv4.ip_forward"] = "1"
			hp.Sysctls["net.ipv4.fib_multipath_hash_policy"] = "1" // L4 hash
			p.Hosts = append(p.Hosts, hp)
		}
	}

	kernelPM := map[string]bool{Client: pmOf(Client) == scenario.PMKernel, Server: pmOf(Server) == scenario.PMKernel}
	for order, pn := range v.Paths {
		sp := s.Path(pn)
		i := byte(indexOf(s, pn) + 1)
		table := 100 + int(i)
		info := PathInfo{Name: pn, Index: int(i), Backup: sp.Backup, ViaCore: sp.ViaCore, Table: table,
			Up: printable(sp.Up), Down: printable(sp.Down)}
		clientAddr := pfx(10, i, 0, 1, 24)
		info.Client = PathEnd{Dev: pn, Addr: clientAddr.Addr()}
		var gw netip.Addr // the client's next hop on a veth access link
		if !sp.ViaCore {
			link := LinkPlan{Name: "path-" + pn, Up: sp.Up, Down: sp.Down, A: End{Host: Client, Dev: pn, Addr: clientAddr},
				B: End{Host: Server, Dev: pn, Addr: pfx(10, i, 0, 2, 24)}}
			info.Server = PathEnd{Dev: pn, Addr: link.B.Addr.Addr()}
			info.Link = link.Name
			p.Links = append(p.Links, link)
		} else {
			r1End := End{Host: R1, Dev: pn, Addr: pfx(10, i, 0, 254, 24)}
			if sp.Plain {
				// No link parameters: the access link is not what is
				// studied, so it is a veth, never the bottleneck.
				p.Veths = append(p.Veths, VethPlan{A: End{Host: Client, Dev: pn, Addr: clientAddr}, B: r1End})
				info.Veth = true
				gw = r1End.Addr.Addr()
			} else {
				link := LinkPlan{Name: "path-" + pn, Up: sp.Up, Down: sp.Down, A: End{Host: Client, Dev: pn, Addr: clientAddr}, B: r1End}
				info.Link = link.Name
				p.Links = append(p.Links, link)
			}
			srv := pfx(10, 100+i, 0, 2, 24)
			r2 := pfx(10, 100+i, 0, 254, 24)
			p.Veths = append(p.Veths, VethPlan{
				A: End{Host: R2, Dev: pn, Addr: r2},
				B: End{Host: Server, Dev: pn, Addr: srv},
			})
			info.Server = PathEnd{Dev: pn, Addr: srv.Addr()}
			// The client reaches this path's server address through the path.
			p.Routes = append(p.Routes, Route{Host: Client, Dst: srv.Masked(), Devs: []string{pn}, Via: gw})
			// The server answers this path's client through r2, and
			// whatever leaves from this path's server address leaves
			// through this path's veth (so that a subflow to it comes back
			// the way it went).
			p.Routes = append(p.Routes, Route{Host: Server, Dst: clientAddr.Masked(), Devs: []string{pn}, Via: r2.Addr()})
			p.Rules = append(p.Rules, Rule{Host: Server, From: srv.Addr(), Table: table})
			p.Routes = append(p.Routes, Route{Host: Server, Dst: netip.MustParsePrefix("0.0.0.0/0"), Devs: []string{pn}, Table: table, Via: r2.Addr()})
		}
		// Source-address routing: whatever the destination, a packet from
		// this path's address leaves through this path.
		p.Rules = append(p.Rules, Rule{Host: Client, From: clientAddr.Addr(), Table: table})
		p.Routes = append(p.Routes, Route{Host: Client, Dst: netip.MustParsePrefix("0.0.0.0/0"), Devs: []string{pn}, Table: table, Via: gw})
		if v.Kind == scenario.KindMPTCP {
			var f pm.Flags
			if order > 0 {
				f |= pm.FlagSubflow
			}
			if sp.Backup {
				f |= pm.FlagBackup
			}
			if f != 0 && kernelPM[Client] {
				info.Endpoint = &f
				info.EPFlags = f.String()
			}
			// Each via-core path has a server address of its own: when
			// the connection starts on one (the multi-homed server of
			// the M-fullmesh poster), the server announces every one but
			// the initial subflow's. When it starts on a direct path,
			// that address is reachable over every path (see
			// routeDirectServersViaCore): a single-homed server, which
			// announces nothing.
			if sp.ViaCore && !sp.NoAnnounce && order > 0 && kernelPM[Server] && s.Path(v.Paths[0]).ViaCore {
				sf := pm.FlagSignal
				info.ServerEndpoint = &sf
				info.ServerEPFlags = sf.String()
			}
		}
		p.Paths = append(p.Paths, info)
	}

	if useCore {
		if err := p.planCore(s, inVariant); err != nil {
			return nil, err
		}
		p.routeDirectServersViaCore()
	}
	p.Limits = limits(s, p.Paths)
	p.SpareJoin = v.Kind == scenario.KindMPTCP && len(v.Daemon[Client]) > 0 && kernelPM[Client]
	return p, nil
}

// limits allow the kernel path manager to use every address pair it can
// reach: a direct path joins one pair, the via-core paths join every
// client address with every server address. The kernel caps each limit at
// MaxEndpoints.
func limits(s *scenario.Scenario, paths []PathInfo) pm.Limits {
	direct, via, signals := 0, 0, 0
	for _, p := range paths {
		if p.ViaCore {
			via++
		} else {
			direct++
		}
		if p.ServerEndpoint != nil {
			signals++
		}
	}
	pairs := direct + via*via
	n := max(len(paths)-1, 0)
	return pm.Limits{
		AddAddrAccepted: uint32(min(max(n, signals), MaxEndpoints)),
		Subflows:        uint32(min(max(n, pairs-1), MaxEndpoints)),
	}
}

// planCore lays out the links between r1 and r2 and how the routers use
// them.
func (p *Plan) planCore(s *scenario.Scenario, inVariant map[string]bool) error {
	if s.Core.LinksPerPair == 0 {
		// Shared links: ECMP over all of them for every via-core path.
		var coreDevs []string
		for k, cl := range s.Core.Links {
			coreDevs = append(coreDevs, cl.Name)
			p.Links = append(p.Links, LinkPlan{
				Name: cl.Name, Up: cl.Up, Down: cl.Down,
				A: End{Host: R1, Dev: cl.Name, Addr: pfx(10, 200, byte(k), 1, 24)},
				B: End{Host: R2, Dev: cl.Name, Addr: pfx(10, 200, byte(k), 2, 24)},
			})
			p.CoreLinks = append(p.CoreLinks, CoreLinkInfo{Name: cl.Name, ID: k, K: k})
		}
		for _, pi := range p.Paths {
			if !pi.ViaCore {
				continue
			}
			i := byte(pi.Index)
			p.Routes = append(p.Routes,
				Route{Host: R1, Dst: pfx(10, 100+i, 0, 0, 24), Devs: coreDevs},
				Route{Host: R2, Dst: pfx(10, i, 0, 0, 24), Devs: coreDevs})
		}
		return nil
	}
	if len(s.Core.Links) > scenario.MaxCoreLinksTotal {
		return fmt.Errorf("the core has %d links; its addressing allows at most %d", len(s.Core.Links), scenario.MaxCoreLinksTotal)
	}
	// Links per pair: the routers route by source and destination address
	// over the pair's links (ECMP among them), and with pinned spread a
	// mark set by the BPF program picks one link.
	type pair struct{ client, server string }
	devs := map[pair][]string{}
	var order []pair
	for id, cl := range s.Core.Links {
		if !inVariant[cl.Client] || !inVariant[cl.Server] {
			continue
		}
		cp, sp := p.Path(cl.Client), p.Path(cl.Server)
		pr := pair{cl.Client, cl.Server}
		if _, ok := devs[pr]; !ok {
			order = append(order, pr)
		}
		devs[pr] = append(devs[pr], cl.Name)
		p.Links = append(p.Links, LinkPlan{
			Name: cl.Name, Up: cl.Up, Down: cl.Down,
			A: End{Host: R1, Dev: cl.Name, Addr: pfx(10, 200, byte(id), 1, 24)},
			B: End{Host: R2, Dev: cl.Name, Addr: pfx(10, 200, byte(id), 2, 24)},
		})
		info := CoreLinkInfo{Name: cl.Name, ID: id, ClientPath: cl.Client, ServerPath: cl.Server,
			ClientAddr: cp.Client.Addr, ServerAddr: sp.Server.Addr, K: cl.K}
		if p.Spread == scenario.SpreadPinned {
			info.Mark = uint32(MarkBase + id)
			info.Table = MarkTableBase + id
			for _, r := range []string{R1, R2} {
				p.Rules = append(p.Rules, Rule{Host: r, Mark: info.Mark, Table: info.Table, Priority: markRulePrio + id})
				p.Routes = append(p.Routes, Route{Host: r, Dst: netip.MustParsePrefix("0.0.0.0/0"), Devs: []string{cl.Name}, Table: info.Table})
			}
		}
		p.CoreLinks = append(p.CoreLinks, info)
	}
	for _, pr := range order {
		cp, sp := p.Path(pr.client), p.Path(pr.server)
		table := pairTableBase + (cp.Index-1)*scenario.MaxPaths + (sp.Index - 1)
		clientNet := netip.PrefixFrom(cp.Client.Addr, 24).Masked()
		serverNet := netip.PrefixFrom(sp.Server.Addr, 24).Masked()
		p.Rules = append(p.Rules,
			Rule{Host: R1, From: cp.Client.Addr, To: serverNet, Table: table},
			Rule{Host: R2, From: sp.Server.Addr, To: clientNet, Table: table})
		p.Routes = append(p.Routes,
			Route{Host: R1, Dst: serverNet, Devs: devs[pr], Table: table},
			Route{Host: R2, Dst: clientNet, Devs: devs[pr], Table: table})
	}
	return nil
}

// routeDirectServersViaCore makes the server's address on each direct path
// reachable through the core too, as a server with one address is over
// every path of a multi-homed client: r1 routes it over every core link,
// r2 hands it to the server over the first via-core path's veth (the
// server takes packets for any of its addresses on any interface). A
// subflow from a via-core client address to the connection's own server
// address then crosses the core, the way the kernel path manager opens
// subflows (to the address the connection started with).
func (p *Plan) routeDirectServersViaCore() {
	var first *PathInfo
	for i := range p.Paths {
		if p.Paths[i].ViaCore {
			first = &p.Paths[i]
			break
		}
	}
	if first == nil {
		return
	}
	var all []string
	for _, l := range p.Links {
		if l.A.Host == R1 && l.B.Host == R2 {
			all = append(all, l.Name)
		}
	}
	for _, pi := range p.Paths {
		if pi.ViaCore {
			continue
		}
		dst := netip.PrefixFrom(pi.Server.Addr, 24).Masked()
		p.Routes = append(p.Routes,
			Route{Host: R1, Dst: dst, Devs: all},
			Route{Host: R2, Dst: dst, Devs: []string{first.Name}, Via: first.Server.Addr})
	}
}

// CoreLink returns a core link of this world by name.
func (p *Plan) CoreLink(name string) *CoreLinkInfo {
	for i := range p.CoreLinks {
		if p.CoreLinks[i].Name == name {
			return &p.CoreLinks[i]
		}
	}
	return nil
}

func indexOf(s *scenario.Scenario, name string) int {
	for i, p := range s.Paths {
		if p.Name == name {
			return i
		}
	}
	return -1
}

func printable(pr linkemu.Params) PathParams {
	pp := PathParams{Rate: "unlimited", Delay: pr.Delay.String(), Loss: pr.Loss.String()}
	if pr.Rate > 0 {
		pp.Rate = pr.Rate.String()
	}
	if pr.Trace != nil {
		pp.Rate = ""
		pp.Trace = pr.Trace.Name
	}
	if pr.Jitter > 0 {
		pp.Jitter = pr.Jitter.String()
	}
	switch {
	case pr.QueueBytes > 0:
		pp.Queue = pr.QueueBytes.String()
	case pr.QueuePackets > 0:
		pp.Queue = fmt.Sprintf("%dpkt", pr.QueuePackets)
	default:
		pp.Queue = fmt.Sprintf("%dpkt", linkemu.DefaultQueuePackets)
	}
	return pp
}

// Host returns the plan of a host role.
func (p *Plan) Host(role string) *HostPlan {
	for i := range p.Hosts {
		if p.Hosts[i].Role == role {
			return &p.Hosts[i]
		}
	}
	return nil
}

// Path returns a path by name.
func (p *Plan) Path(name string) *PathInfo {
	for i := range p.Paths {
		if p.Paths[i].Name == name {
			return &p.Paths[i]
		}
	}
	return nil
}
