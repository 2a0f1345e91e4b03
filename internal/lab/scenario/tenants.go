package scenario

import (
	"fmt"
	"regexp"
	"strings"

	"mpsteer/internal/yamlcfg"
)

// Tenants is a multi-tenant cloud world (instead of paths and a core): two
// hypervisors joined by several physical links, tenant VMs behind a bridge
// or veths in each hypervisor, the VM pairs whose transfers are measured
// (one, or several whose goodput is summed), and other tenants' VM pairs
// that make background traffic.
type Tenants struct {
	// Hypervisors are the two hypervisors' names (host roles).
	Hypervisors [2]string
	// Attach is how VMs are joined to their hypervisor: AttachBridge (one
	// bridge, vmbr0, per hypervisor) or AttachVeth (a routed veth per VM).
	Attach string
	// Links are the physical links between the hypervisors; Up is from
	// the first hypervisor to the second. The first carries the
	// hypervisors' default routes.
	Links []CoreLink
	VMs   []VM
	// Client and Server are the measured VM pair (the first of Pairs):
	// the one whose sockets the run records.
	Client, Server string
	// Pairs are every measured pair, client then server VM; traffic
	// without a pair runs between each of them, and their goodput is
	// summed.
	Pairs [][2]string
	// Subflows is how many subflows the measured pairs' MPTCP connections
	// have: each server VM announces its one address on Subflows-1 more
	// ports (kernel path manager signal endpoints with a port), and the
	// client VM's kernel path manager opens a subflow to each.
	Subflows int
	Line     int
}

// VM is one tenant VM: a network namespace with one virtual NIC (eth0).
type VM struct {
	Host        // its name, congestion control and socket buffers
	On   string // its hypervisor
	Line int
}

// How VMs are joined to their hypervisor.
const (
	AttachBridge = "bridge"
	AttachVeth   = "veth"
)

// Limits of a tenants world.
const (
	MaxTenantLinks    = 16
	MaxVMsPerHost     = 250
	MaxTenantSubflows = 8
	// MaxMeasuredPairs: every measured VM is a namespace with its own
	// traffic generator goroutines; 64 pairs (128 VMs) is well beyond
	// what a 2-core machine runs faithfully.
	MaxMeasuredPairs = 64
)

// BridgeName is the hypervisors' bridge with attach: bridge.
const BridgeName = "vmbr0"

// hostNameRE: host names of a tenants world name namespaces
// (mps-<lab>-<host>), so they have no '-'.
var hostNameRE = regexp.MustCompile(`^[a-z][a-z0-9]{0,14}$`)

// VM returns the VM with this name.
func (t *Tenants) VM(name string) *VM {
	for i := range t.VMs {
		if t.VMs[i].Name == name {
			return &t.VMs[i]
		}
	}
	return nil
}

// Hosts lists every host role of the world: the hypervisors, then the VMs.
func (t *Tenants) Hosts() []string {
	out := []string{t.Hypervisors[0], t.Hypervisors[1]}
	for _, v := range t.VMs {
		out = append(out, v.Name)
	}
	return out
}

// VMNames lists the VMs.
func (t *Tenants) VMNames() []string {
	var out []string
	for _, v := range t.VMs {
		out = append(out, v.Name)
	}
	return out
}

func parseTenants(m *yamlcfg.Map, dir string) *Tenants {
	t := &Tenants{Hypervisors: [2]string{"hv1", "hv2"}, Line: m.Line(), Subflows: 1}
	names := map[string]string{} // host name → what it is
	if m.Has("hypervisors") {
		hv := m.Strings("hypervisors")
		switch {
		case m.Failed("hypervisors"):
		case len(hv) != 2:
			m.Errorf("hypervisors", "%d hypervisors given; a tenants world has exactly two (e.g. [hv1, hv2])", len(hv))
		default:
			t.Hypervisors = [2]string{hv[0], hv[1]}
		}
	}
	for _, h := range t.Hypervisors {
		switch {
		case !hostNameRE.MatchString(h):
			m.Errorf("hypervisors", "%q is not a valid host name (lower-case letters and digits, starting with a letter, at most 15 characters: it names a network namespace)", h)
		case names[h] != "":
			m.Errorf("hypervisors", "hypervisor name %q is used twice", h)
		}
		names[h] = "a hypervisor"
	}
	t.Attach = m.Enum("attach", AttachBridge, AttachBridge, AttachVeth)

	links := m.List("links")
	switch {
	case len(links) == 0 && !m.Failed("links"):
		m.Errorf("links", "a tenants world needs physical links between its hypervisors, e.g. links: [{name: phy1, rate: 100mbit}, {name: phy2, rate: 100mbit}]")
	case len(links) > MaxTenantLinks:
		m.Errorf("links", "%d links given; at most %d are supported", len(links), MaxTenantLinks)
	}
	devs := map[string]bool{BridgeName: true}
	for _, it := range links {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a link is a mapping with at least a name (e.g. {name: phy1, rate: 100mbit, delay: 1ms})")
			continue
		}
		lm := it.Map
		l := CoreLink{Name: lm.String("name", "")}
		switch {
		case lm.Failed("name"):
		case l.Name == "":
			lm.Errorf("name", "every link needs a name (it names the link's device in both hypervisors)")
		case !nameRE.MatchString(l.Name):
			lm.Errorf("name", "%q is not a valid link name (lower-case letters, digits and '-', starting with a letter, at most 15 characters: it names network devices)", l.Name)
		case devs[l.Name]:
			lm.Errorf("name", "link name %q is used twice (or is the bridge's)", l.Name)
		}
		devs[l.Name] = true
		l.Up, l.Down = parseUpDown(lm, dir)
		lm.Done()
		t.Links = append(t.Links, l)
	}

	perHost := map[string]int{}
	vms := m.List("vms")
	if len(vms) < 2 && !m.Failed("vms") {
		m.Errorf("vms", "a tenants world needs at least two VMs (the measured pair), e.g. vms: [{name: vm1, on: hv1}, {name: vm2, on: hv2}]")
	}
	if len(vms) > 2*MaxVMsPerHost {
		// Every VM is a host that each variant's daemon: section is
		// searched for, so the VMs past the bound are not read.
		m.Errorf("vms", "%d VMs given; at most %d are supported (%d on each hypervisor)", len(vms), 2*MaxVMsPerHost, MaxVMsPerHost)
		vms = vms[:2*MaxVMsPerHost]
	}
	for _, it := range vms {
		if it.Map == nil {
			m.ErrorAt(it.Node, it.Path, "a VM is a mapping such as {name: vm1, on: hv1}")
			continue
		}
		vm := it.Map
		v := VM{Line: vm.Line()}
		v.Name = vm.String("name", "")
		switch {
		case vm.Failed("name"):
		case v.Name == "":
			vm.Errorf("name", "every VM needs a name")
		case !hostNameRE.MatchString(v.Name):
			vm.Errorf("name", "%q is not a valid VM name (lower-case letters and digits, starting with a letter, at most 15 characters: it names a network namespace and the VM's device in its hypervisor)", v.Name)
		case names[v.Name] != "":
			vm.Errorf("name", "%q is %s already", v.Name, names[v.Name])
		case devs[v.Name]:
			vm.Errorf("name", "%q is the name of a link (or the bridge): it would name two devices in the hypervisor", v.Name)
		}
		if v.Name != "" {
			names[v.Name] = "a VM"
		}
		v.On = vm.String("on", "")
		switch {
		case vm.Failed("on"):
		case v.On == "":
			vm.Errorf("on", "name the VM's hypervisor (on: %s or on: %s)", t.Hypervisors[0], t.Hypervisors[1])
		case v.On != t.Hypervisors[0] && v.On != t.Hypervisors[1]:
			vm.Errorf("on", "%q is not a hypervisor (valid: %s, %s)", v.On, t.Hypervisors[0], t.Hypervisors[1])
		default:
			perHost[v.On]++
			if perHost[v.On] == MaxVMsPerHost+1 {
				vm.Errorf("on", "more than %d VMs on %s", MaxVMsPerHost, v.On)
			}
		}
		v.CC = vm.String("cc", "")
		if v.CC != "" && !ccRE.MatchString(v.CC) {
			vm.Errorf("cc", "%q is not a congestion control name (e.g. bbr, cubic, reno)", v.CC)
		}
		v.Rmem = vm.SizeIn("rmem", 0, 0, MaxSocketBuffer)
		v.Wmem = vm.SizeIn("wmem", 0, 0, MaxSocketBuffer)
		vm.Done()
		t.VMs = append(t.VMs, v)
	}

	ms := m.Map("measure")
	if ms == nil {
		if !m.Failed("measure") {
			m.Errorf("measure", "name the measured VM pair, e.g. measure: {client: vm1, server: vm2}, or pairs: measure: {pairs: [[vm1, vm2], [vm3, vm4]]}")
		}
	} else {
		t.parseMeasure(ms)
		t.Subflows = ms.Int("subflows", 1, 1, MaxTenantSubflows)
		ms.Done()
	}
	m.Done()
	return t
}

// parseMeasure reads the measured pairs: client and server (one pair), or
// pairs, a list of {client, server}.
func (t *Tenants) parseMeasure(ms *yamlcfg.Map) {
	if ms.Has("pairs") {
		if ms.Has("client") || ms.Has("server") {
			ms.Errorf("pairs", "give either client and server (one measured pair) or pairs (several), not both")
			return
		}
		items := ms.List("pairs")
		switch {
		case ms.Failed("pairs"):
			return
		case len(items) == 0:
			ms.Errorf("pairs", "pairs is a list of measured VM pairs, e.g. pairs: [{client: vm1, server: vm2}, {client: vm3, server: vm4}]")
			return
		case len(items) > MaxMeasuredPairs:
			ms.Errorf("pairs", "%d measured pairs; at most %d are supported", len(items), MaxMeasuredPairs)
			return
		}
		used := map[string]int{} // VM → its pair (1-based)
		for i, it := range items {
			if it.Map == nil {
				ms.ErrorAt(it.Node, it.Path, "a measured pair is a mapping {client: VM, server: VM}")
				continue
			}
			if p, ok := t.parseOnePair(it.Map); ok {
				dup := false
				for k, n := range map[string]string{"client": p[0], "server": p[1]} {
					if j := used[n]; j > 0 {
						it.Map.Errorf(k, "%s is in pair %d already; each measured VM is in one pair", n, j)
						dup = true
					}
					used[n] = i + 1
				}
				if !dup {
					t.Pairs = append(t.Pairs, p)
				}
			}
			it.Map.Done()
		}
	} else if p, ok := t.parseOnePair(ms); ok {
		t.Pairs = [][2]string{p}
	}
	if len(t.Pairs) > 0 {
		t.Client, t.Server = t.Pairs[0][0], t.Pairs[0][1]
	}
}

// parseOnePair reads {client: VM, server: VM}.
func (t *Tenants) parseOnePair(ms *yamlcfg.Map) (p [2]string, ok bool) {
	p = [2]string{ms.String("client", ""), ms.String("server", "")}
	ok = true
	for i, k := range []string{"client", "server"} {
		switch n := p[i]; {
		case ms.Failed(k):
			ok = false
		case n == "":
			ms.Errorf(k, "name the measured pair's %s VM", k)
			ok = false
		case t.VM(n) == nil:
			ms.Errorf(k, "%q is not a VM (VMs: %s)", n, strings.Join(t.VMNames(), ", "))
			ok = false
		}
	}
	if ok && p[0] == p[1] {
		ms.Errorf("server", "the measured pair needs two VMs, not %s twice", p[0])
		ok = false
	}
	return p, ok
}

// MeasuredPair reports whether client → server is one of the measured
// pairs.
func (t *Tenants) MeasuredPair(p [2]string) bool {
	for _, q := range t.Pairs {
		if q == p {
			return true
		}
	}
	return false
}

// parsePair reads a traffic entry's VM pair (default: the measured pair).
func parsePair(t *yamlcfg.Map, tn *Tenants) [2]string {
	if tn == nil {
		if t.Has("pair") {
			t.Errorf("pair", "pair names two VMs of a tenants world; this scenario has paths (leave pair out)")
		}
		return [2]string{}
	}
	if !t.Has("pair") {
		return [2]string{tn.Client, tn.Server}
	}
	p := t.Strings("pair")
	switch {
	case t.Failed("pair"):
	case len(p) != 2:
		t.Errorf("pair", "a pair is two VMs, the client and the server: pair: [vm3, vm4]")
	case p[0] == p[1]:
		t.Errorf("pair", "a pair needs two different VMs, not %s twice", p[0])
	default:
		for _, n := range p {
			if tn.VM(n) == nil {
				t.Errorf("pair", "%q is not a VM (VMs: %s)", n, strings.Join(tn.VMNames(), ", "))
				return [2]string{}
			}
		}
		return [2]string{p[0], p[1]}
	}
	return [2]string{}
}

// Measured reports whether the traffic runs between measured pairs
// (always so without tenants, but for competitors: competitor.go).
func (t Traffic) Measured(s *Scenario) bool {
	if t.Competitor {
		return false
	}
	if s.Tenants == nil || t.AllPairs {
		return true
	}
	return s.Tenants.MeasuredPair(t.Pair)
}

// Pairs are the VM pairs a tenants world's traffic entry runs between:
// every measured pair when it names none, else its own.
func (t Traffic) Pairs(s *Scenario) [][2]string {
	if s.Tenants == nil {
		return nil
	}
	if t.AllPairs {
		return s.Tenants.Pairs
	}
	return [][2]string{t.Pair}
}

func (t *Tenants) String() string {
	pairs := ""
	if len(t.Pairs) > 1 {
		pairs = fmt.Sprintf(", %d measured pairs", len(t.Pairs))
	}
	return fmt.Sprintf("%d VMs on %s and %s, %d links%s", len(t.VMs), t.Hypervisors[0], t.Hypervisors[1], len(t.Links), pairs)
}
