package world

import (
	"fmt"
	"net/netip"

	"github.com/vishvananda/netlink"

	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/pm"
)

// A tenants world (scenario key tenants): two hypervisors joined by
// emulated physical links, and VMs (namespaces with one NIC, eth0) behind
// a bridge or veths in each hypervisor.
//
// Addresses: physical link k (1-based) has 10.250.k.1 in the first
// hypervisor and 10.250.k.2 in the second (its device carries the link's
// name in both). VMs of hypervisor h (1 or 2) are in 10.h.0.0/16: with a
// bridge (vmbr0, 10.h.0.254/24) the j-th VM has 10.h.0.j/24; with veths
// the j-th VM has 10.h.j.1/24 and its device in the hypervisor (named
// after the VM) 10.h.j.254/24. Each hypervisor has one default route, over
// the first link to the other one, as a hypervisor with one upstream
// does: without an operator's policy all VM traffic takes that link
// (with a variant's spread: ecmp, one default route over every link,
// hashed by 5-tuple).

// VMDev is a VM's one NIC.
const VMDev = "eth0"

// TenantsInfo is the tenants world as built.
type TenantsInfo struct {
	Hypervisors [2]string    `json:"hypervisors"`
	Attach      string       `json:"attach"`
	Links       []TenantLink `json:"links"`
	VMs         []VMInfo     `json:"vms"`
	// Client and Server are the measured pair whose sockets are recorded
	// (the first of Pairs); Pairs every measured pair; Subflows the
	// subflows their MPTCP connections get.
	Client   string      `json:"client"`
	Server   string      `json:"server"`
	Pairs    [][2]string `json:"pairs,omitempty"`
	Subflows int         `json:"subflows"`
}

// TenantLink is one physical link between the hypervisors.
type TenantLink struct {
	Name string     `json:"name"`
	A    netip.Addr `json:"a"` // first hypervisor's address
	B    netip.Addr `json:"b"` // second hypervisor's address
}

// VMInfo is one VM as built.
type VMInfo struct {
	Name  string     `json:"name"`
	On    string     `json:"on"`
	NetNS string     `json:"netns"`
	Dev   string     `json:"dev"`
	Addr  netip.Addr `json:"addr"`
	// Gateway is its hypervisor's address facing it; HostDev its device
	// in the hypervisor (a bridge port, or a routed veth).
	Gateway netip.Addr `json:"gateway"`
	HostDev string     `json:"host_dev"`
}

// BridgePlan is a bridge in a host.
type BridgePlan struct {
	Host string       `json:"host"`
	Name string       `json:"name"`
	Addr netip.Prefix `json:"addr"`
}

// EndpointPlan is a kernel path-manager endpoint of a host.
type EndpointPlan struct {
	Host  string     `json:"host"`
	Dev   string     `json:"dev"`
	Addr  netip.Addr `json:"addr"`
	Port  uint16     `json:"port,omitempty"`
	Flags string     `json:"flags"`
	flags pm.Flags
}

// AnnouncePortBase is the first port each measured server VM announces
// its address on (subflows > 1): 5301, 5302, …
const AnnouncePortBase = 5301

// VM returns a VM by name.
func (t *TenantsInfo) VM(name string) *VMInfo {
	if t == nil {
		return nil
	}
	for i := range t.VMs {
		if t.VMs[i].Name == name {
			return &t.VMs[i]
		}
	}
	return nil
}

// ClientRole is the host whose connections are measured: the client, or
// in a tenants world the measured client VM.
func (p *Plan) ClientRole() string {
	if p.Tenants != nil {
		return p.Tenants.Client
	}
	return Client
}

// ServerRole is the measured server host.
func (p *Plan) ServerRole() string {
	if p.Tenants != nil {
		return p.Tenants.Server
	}
	return Server
}

// Role maps a scenario's host name to the world's role: client and server
// are the measured pair in a tenants world; other names are roles.
func (p *Plan) Role(host string) string {
	switch host {
	case Client:
		return p.ClientRole()
	case Server:
		return p.ServerRole()
	}
	return host
}

func newTenantsPlan(name string, s *scenario.Scenario, v *scenario.Variant) (*Plan, error) {
	t := s.Tenants
	p := &Plan{Name: name, Scenario: s.File, Variant: v.Name, Kind: string(v.Kind), Seed: s.Seed, Mptcpd: v.Mptcpd}
	ti := &TenantsInfo{Hypervisors: t.Hypervisors, Attach: t.Attach, Client: t.Client, Server: t.Server, Subflows: t.Subflows}
	if len(t.Pairs) > 1 {
		ti.Pairs = t.Pairs
	}
	clients, servers := map[string]bool{}, map[string]bool{}
	for _, pr := range t.Pairs {
		clients[pr[0]], servers[pr[1]] = true, true
	}
	if v.Kind == scenario.KindTCP {
		ti.Subflows = 1
	}
	p.Tenants = ti
	if len(t.Links) == 0 || len(t.Links) > scenario.MaxTenantLinks {
		return nil, fmt.Errorf("a tenants world needs 1 to %d links (has %d)", scenario.MaxTenantLinks, len(t.Links))
	}
	pmOf := func(vm string) string {
		switch {
		case clients[vm] && (v.PathManager["client"] == scenario.PMUserspace || v.Mptcpd != ""):
			return scenario.PMUserspace
		case servers[vm] && v.PathManager["server"] == scenario.PMUserspace:
			return scenario.PMUserspace
		}
		return scenario.PMKernel
	}
	if v.Kind == scenario.KindMPTCP && t.Subflows > 1 && pmOf(t.Server) != scenario.PMKernel {
		return nil, fmt.Errorf("variant %s: subflows: %d is made by the server VM's kernel path manager (it announces its address on more ports), but the variant gives it the userspace path manager", v.Name, t.Subflows)
	}
	ecmp := v.Spread == scenario.SpreadECMP && len(t.Links) > 1
	for hi, hv := range t.Hypervisors {
		hp := hostPlan(name, hv, nil, "")
		hp.Sysctls["net.ipv4.ip_forward"] = "1"
		if ecmp {
			hp.Sysctls["net.ipv4.fib_multipath_hash_policy"] = "1" // L4 hash
		}
		p.Hosts = append(p.Hosts, hp)
		if t.Attach == scenario.AttachBridge {
			p.Bridges = append(p.Bridges, BridgePlan{Host: hv, Name: scenario.BridgeName, Addr: pfx(10, byte(hi+1), 0, 254, 24)})
		}
	}
	zero := netip.MustParsePrefix("0.0.0.0/0")
	for k, l := range t.Links {
		a, b := pfx(10, 250, byte(k+1), 1, 24), pfx(10, 250, byte(k+1), 2, 24)
		p.Links = append(p.Links, LinkPlan{Name: l.Name, Up: l.Up, Down: l.Down,
			A: End{Host: t.Hypervisors[0], Dev: l.Name, Addr: a}, B: End{Host: t.Hypervisors[1], Dev: l.Name, Addr: b}})
		// As core links: events and `lab set` name them.
		p.CoreLinks = append(p.CoreLinks, CoreLinkInfo{Name: l.Name, ID: k, K: k})
		ti.Links = append(ti.Links, TenantLink{Name: l.Name, A: a.Addr(), B: b.Addr()})
	}
	first := ti.Links[0]
	if ecmp {
		// spread: ecmp, what a hypervisor with several uplinks and no
		// operator's policy would do: one default route over every link,
		// each flow (5-tuple) hashed onto one, collisions included.
		var devs []string
		for _, l := range ti.Links {
			devs = append(devs, l.Name)
		}
		p.Spread = scenario.SpreadECMP
		p.Routes = append(p.Routes,
			Route{Host: t.Hypervisors[0], Dst: zero, Devs: devs},
			Route{Host: t.Hypervisors[1], Dst: zero, Devs: devs})
	} else {
		p.Routes = append(p.Routes,
			Route{Host: t.Hypervisors[0], Dst: zero, Devs: []string{first.Name}, Via: first.B},
			Route{Host: t.Hypervisors[1], Dst: zero, Devs: []string{first.Name}, Via: first.A})
	}
	count := map[string]int{}
	for _, vm := range t.VMs {
		h := byte(1)
		if vm.On == t.Hypervisors[1] {
			h = 2
		}
		count[vm.On]++
		j := byte(count[vm.On])
		host := vm.Host
		hp := hostPlan(name, vm.Name, &host, pmOf(vm.Name))
		p.Hosts = append(p.Hosts, hp)
		info := VMInfo{Name: vm.Name, On: vm.On, NetNS: hp.NetNS, Dev: VMDev, HostDev: vm.Name}
		var vmAddr netip.Prefix
		hostEnd := End{Host: vm.On, Dev: vm.Name}
		if t.Attach == scenario.AttachBridge {
			vmAddr = pfx(10, h, 0, j, 24)
			info.Gateway = pfx(10, h, 0, 254, 24).Addr()
			hostEnd.Master = scenario.BridgeName
		} else {
			vmAddr = pfx(10, h, j, 1, 24)
			hostEnd.Addr = pfx(10, h, j, 254, 24)
			info.Gateway = hostEnd.Addr.Addr()
		}
		info.Addr = vmAddr.Addr()
		p.Veths = append(p.Veths, VethPlan{A: hostEnd, B: End{Host: vm.Name, Dev: VMDev, Addr: vmAddr}})
		p.Routes = append(p.Routes, Route{Host: vm.Name, Dst: zero, Devs: []string{VMDev}, Via: info.Gateway})
		ti.VMs = append(ti.VMs, info)
	}
	cli, srv := ti.VM(t.Client), ti.VM(t.Server)
	if cli == nil || srv == nil {
		return nil, fmt.Errorf("the measured pair %s, %s is not among the VMs", t.Client, t.Server)
	}
	// The measured pair as the world's one path: what the runner's
	// traffic and per-path figures use.
	p.Paths = []PathInfo{{Name: t.Client + "-" + t.Server, Index: 1, Veth: true,
		Client: PathEnd{Dev: VMDev, Addr: cli.Addr}, Server: PathEnd{Dev: VMDev, Addr: srv.Addr}}}
	if v.Kind == scenario.KindMPTCP {
		// Every VM may use what its peer announces; only the measured
		// servers announce anything (each its address on more ports).
		p.Limits = pm.Limits{AddAddrAccepted: MaxEndpoints, Subflows: MaxEndpoints}
		for _, pr := range t.Pairs {
			sv := ti.VM(pr[1])
			if sv == nil {
				return nil, fmt.Errorf("the measured pair %s, %s is not among the VMs", pr[0], pr[1])
			}
			for i := 1; i < ti.Subflows; i++ {
				p.Endpoints = append(p.Endpoints, EndpointPlan{Host: sv.Name, Dev: VMDev, Addr: sv.Addr, Port: uint16(AnnouncePortBase + i - 1),
					Flags: pm.FlagSignal.String(), flags: pm.FlagSignal})
			}
		}
	}
	return p, nil
}

// makeBridge creates a bridge with its address.
func (w *World) makeBridge(b BridgePlan) error {
	h, err := w.nl(b.Host)
	if err != nil {
		return err
	}
	defer h.Close()
	br := &netlink.Bridge{LinkAttrs: netlink.LinkAttrs{Name: b.Name, MTU: 1500}}
	if err := h.LinkAdd(br); err != nil {
		return fmt.Errorf("host %s: bridge %s: %w", b.Host, b.Name, err)
	}
	return w.configureDev(End{Host: b.Host, Dev: b.Name, Addr: b.Addr})
}

// configureTenantsMPTCP sets every VM's path-manager limits and the
// measured servers' signal endpoints.
func (w *World) configureTenantsMPTCP() error {
	for _, vm := range w.Tenants.VMs {
		c, err := pm.Dial(pm.Options{NetNSName: vm.NetNS})
		if err != nil {
			return err
		}
		err = c.SetLimits(w.Limits)
		for _, e := range w.Endpoints {
			if err != nil || e.Host != vm.Name {
				continue
			}
			f := e.flags
			if f == 0 {
				// Read back from plan.json (flags is not serialised).
				f = pm.FlagSignal
			}
			var l netlink.Link
			h, herr := w.nl(vm.Name)
			if herr != nil {
				err = herr
				continue
			}
			l, err = h.LinkByName(e.Dev)
			h.Close()
			if err == nil {
				_, err = c.AddEndpoint(pm.Endpoint{Addr: e.Addr, Port: e.Port, Flags: f, IfIndex: int32(l.Attrs().Index)})
			}
			if err != nil {
				err = fmt.Errorf("endpoint %s port %d: %w", e.Addr, e.Port, err)
			}
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("VM %s: %w", vm.Name, err)
		}
	}
	return nil
}
