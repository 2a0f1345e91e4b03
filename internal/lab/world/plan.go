// Package world builds and removes a lab world: network namespaces for the
// hosts, emulated links (TUN pairs driven by `mpsteer lab emulate`),
// addresses, routes and the MPTCP path-manager configuration.
package world

import (
	"fmt"
	"net/netip"
	"regexp"

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
	Addr netip.Prefix `json:"addr"`
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
	Name     string     `json:"name"`
	Index    int        `json:"index"` // 1-based position in the scenario
	Client   PathEnd    `json:"client"`
	Server   PathEnd    `json:"server"`
	Link     string     `json:"link"` // emulated link carrying the access part
	Backup   bool       `json:"backup"`
	ViaCore  bool       `json:"via_core"`
	Endpoint *pm.Flags  `json:"-"`
	EPFlags  string     `json:"endpoint_flags,omitempty"`
	Table    int        `json:"table"`
	Up       PathParams `json:"up"`
	Down     PathParams `json:"down"`
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

// Rule is a source-address policy rule.
type Rule struct {
	Host  string     `json:"host"`
	From  netip.Addr `json:"from"`
	Table int        `json:"table"`
}

// HostPlan is one namespace.
type HostPlan struct {
	Role    string            `json:"role"`
	NetNS   string            `json:"netns"`
	Sysctls map[string]string `json:"sysctls"`
	CC      string            `json:"cc,omitempty"`
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
	// ClientLimits and ServerLimits are the path-manager limits.
	Limits pm.Limits `json:"limits"`
}

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
// 10.(100+i).0.254; core link k: r1 10.200.k.1, r2 10.200.k.2.
func pfx(a, b, c, d byte, bits int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{a, b, c, d}), bits)
}

// NewPlan lays out the world for one variant of a scenario.
func NewPlan(name string, s *scenario.Scenario, v *scenario.Variant) (*Plan, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	p := &Plan{Name: name, Scenario: s.File, Variant: v.Name, Kind: string(v.Kind), Seed: s.Seed}
	if v.Kind == scenario.KindMPTCP && len(v.Paths) > MaxEndpoints+1 {
		return nil, fmt.Errorf("variant %s uses %d paths, but the kernel's path manager takes at most %d endpoints (%d paths)", v.Name, len(v.Paths), MaxEndpoints, MaxEndpoints+1)
	}
	useCore := false
	for _, pn := range v.Paths {
		if s.Path(pn).ViaCore {
			useCore = true
		}
	}
	common := map[string]string{
		"net.mptcp.enabled":                  "1",
		"net.ipv4.conf.all.rp_filter":        "0",
		"net.ipv4.conf.default.rp_filter":    "0",
		"net.ipv6.conf.all.disable_ipv6":     "1",
		"net.ipv6.conf.default.disable_ipv6": "1",
	}
	host := func(role string, h *scenario.Host) HostPlan {
		hp := HostPlan{Role: role, NetNS: NetNS(name, role), Sysctls: map[string]string{}}
		for k, val := range common {
			hp.Sysctls[k] = val
		}
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
		return hp
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

	for order, pn := range v.Paths {
		sp := s.Path(pn)
		i := byte(indexOf(s, pn) + 1)
		table := 100 + int(i)
		info := PathInfo{Name: pn, Index: int(i), Backup: sp.Backup, ViaCore: sp.ViaCore, Table: table,
			Up: printable(sp.Up), Down: printable(sp.Down)}
		clientAddr := pfx(10, i, 0, 1, 24)
		info.Client = PathEnd{Dev: pn, Addr: clientAddr.Addr()}
		link := LinkPlan{Name: "path-" + pn, Up: sp.Up, Down: sp.Down, A: End{Host: Client, Dev: pn, Addr: clientAddr}}
		if !sp.ViaCore {
			link.B = End{Host: Server, Dev: pn, Addr: pfx(10, i, 0, 2, 24)}
			info.Server = PathEnd{Dev: pn, Addr: link.B.Addr.Addr()}
		} else {
			link.B = End{Host: R1, Dev: pn, Addr: pfx(10, i, 0, 254, 24)}
			srv := pfx(10, 100+i, 0, 2, 24)
			p.Veths = append(p.Veths, VethPlan{
				A: End{Host: R2, Dev: pn, Addr: pfx(10, 100+i, 0, 254, 24)},
				B: End{Host: Server, Dev: pn, Addr: srv},
			})
			info.Server = PathEnd{Dev: pn, Addr: srv.Addr()}
			// The client reaches this path's server address through the path.
			p.Routes = append(p.Routes, Route{Host: Client, Dst: srv.Masked(), Devs: []string{pn}})
			// The server answers this path's client through r2.
			p.Routes = append(p.Routes, Route{Host: Server, Dst: clientAddr.Masked(), Devs: []string{pn}, Via: pfx(10, 100+i, 0, 254, 24).Addr()})
		}
		info.Link = link.Name
		p.Links = append(p.Links, link)
		// Source-address routing: whatever the destination, a packet from
		// this path's address leaves through this path.
		p.Rules = append(p.Rules, Rule{Host: Client, From: clientAddr.Addr(), Table: table})
		p.Routes = append(p.Routes, Route{Host: Client, Dst: netip.MustParsePrefix("0.0.0.0/0"), Devs: []string{pn}, Table: table})
		if v.Kind == scenario.KindMPTCP {
			var f pm.Flags
			if order > 0 {
				f |= pm.FlagSubflow
			}
			if sp.Backup {
				f |= pm.FlagBackup
			}
			if f != 0 {
				info.Endpoint = &f
				info.EPFlags = f.String()
			}
		}
		p.Paths = append(p.Paths, info)
	}

	if useCore {
		var coreDevs []string
		for k, cl := range s.Core.Links {
			dev := fmt.Sprintf("core%d", k)
			coreDevs = append(coreDevs, dev)
			p.Links = append(p.Links, LinkPlan{
				Name: dev, Up: cl.Up, Down: cl.Down,
				A: End{Host: R1, Dev: dev, Addr: pfx(10, 200, byte(k), 1, 24)},
				B: End{Host: R2, Dev: dev, Addr: pfx(10, 200, byte(k), 2, 24)},
			})
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
	}
	n := uint32(min(len(v.Paths)-1, MaxEndpoints))
	p.Limits = pm.Limits{AddAddrAccepted: n, Subflows: n}
	return p, nil
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
