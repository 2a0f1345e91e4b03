package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"mpsteer/internal/yamlcfg"
)

// Spread is the operator's policy for MPTCP in a multi-tenant cloud
// (emptcp-full-extensibility, use case 1): on a hypervisor, every subflow
// of a VM's MPTCP connection leaves by a different physical uplink, so
// that a tenant's multipath connection really uses several links without
// the operator touching the VM, and without the VM knowing the links.
//
// It is not expressed as actions. Actions act on the subflows of this
// namespace's own sockets, after the policy has seen them in a sample;
// the VMs' sockets live in other kernels (here: other namespaces) that
// the hypervisor never samples, and the choice of a link has to be made
// on a subflow's very first packet, before any sample could show it.
// So the decision is made per packet, in BPF (internal/datapath/spread):
// at TCX ingress of the VM-facing devices (From) a SYN with MP_CAPABLE
// or MP_JOIN gets the next uplink of its (VM address, remote address)
// pair, round-robin, the choice is kept per 5-tuple, and the flow's
// packets are marked for policy routing (one rule and table per uplink)
// that sends them out of that uplink. Subflows opened by remote hosts are
// remembered at the uplink they came in on, and the VM's replies leave
// there. The policy only carries the configuration and the status; the
// daemon installs the datapath (and removes it on exit: rules, routes
// and programs), and Decide returns nothing.
type Spread struct {
	mu sync.Mutex
	// From are the VM-facing devices; Via the uplinks in round-robin
	// order.
	From []string
	Via  []SpreadUplink
	// MarkBase, TableBase, Priority: uplink i is marked MarkBase+i and
	// routed by table TableBase+i, by a rule of priority Priority.
	MarkBase  uint32
	TableBase int
	Priority  int
	// Where is the policy's entry in its config (file:line: path), for
	// errors that only show when the datapath is installed.
	Where string
	// datapath reports what the installed datapath counted (nil: not
	// installed).
	datapath func() any
}

// SpreadUplink is one uplink: its device and next hop.
type SpreadUplink struct {
	Dev string
	// Gateway is the next hop (invalid: a point-to-point device that
	// needs none).
	Gateway netip.Addr
}

// Spread's defaults and limits.
const (
	SpreadMaxUplinks       = 16
	SpreadDefaultMarkBase  = 0x5350
	SpreadDefaultTableBase = 5350
	SpreadDefaultPriority  = 5350
)

var spreadDevRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

func init() {
	Register("spread", func(m *yamlcfg.Map, env Env) Policy {
		p := &Spread{MarkBase: SpreadDefaultMarkBase, TableBase: SpreadDefaultTableBase, Priority: SpreadDefaultPriority,
			Where: fmt.Sprintf("%s:%d: %s", m.File(), m.Line(), m.Path())}
		used := map[string]string{} // device → the key that named it
		checkDev := func(mm *yamlcfg.Map, key, dev, what string) bool {
			switch {
			case dev == "":
				mm.Errorf(key, "name the %s device", what)
			case !spreadDevRE.MatchString(dev):
				mm.Errorf(key, "%q is not a device name", dev)
			case used[dev] != "":
				mm.Errorf(key, "device %s is named twice (also in %s): a device is either VM-facing (from) or an uplink (via), once", dev, used[dev])
			default:
				if env.Addrs != nil {
					if _, ok := env.Addrs(dev); !ok {
						mm.Errorf(key, "this host has no device %s", dev)
						return false
					}
				}
				used[dev] = mm.Path() + "." + key
				return true
			}
			return false
		}
		if !m.Has("from") {
			m.Errorf("from", "name the VM-facing devices whose VMs' subflows are spread (from: [vmbr0], a bridge or the VMs' tap/veth devices)")
		}
		for _, d := range m.Strings("from") {
			checkDev(m, "from", d, "VM-facing")
			p.From = append(p.From, d)
		}
		if m.Has("from") && len(p.From) == 0 && !m.Failed("from") {
			m.Errorf("from", "name at least one VM-facing device")
		}
		items := m.List("via")
		switch {
		case !m.Has("via"):
			m.Errorf("via", "name the uplinks to spread over (via: [{dev: phy1, gateway: 10.0.1.2}, {dev: phy2, gateway: 10.0.2.2}])")
		case len(items) < 2 && !m.Failed("via"):
			m.Errorf("via", "%d uplink given; spreading needs at least 2", len(items))
		case len(items) > SpreadMaxUplinks:
			m.Errorf("via", "%d uplinks given; at most %d are supported", len(items), SpreadMaxUplinks)
		}
		for _, it := range items {
			if it.Map == nil {
				// A bare device name: a point-to-point uplink.
				u := SpreadUplink{Dev: it.Scalar}
				if it.Scalar == "" || !spreadDevRE.MatchString(it.Scalar) {
					m.ErrorAt(it.Node, it.Path, "an uplink is a mapping such as {dev: phy1, gateway: 10.0.1.2} (or a device name alone for a point-to-point link)")
					continue
				}
				if used[u.Dev] != "" {
					m.ErrorAt(it.Node, it.Path, "device %s is named twice (also in %s)", u.Dev, used[u.Dev])
					continue
				}
				if env.Addrs != nil {
					if _, ok := env.Addrs(u.Dev); !ok {
						m.ErrorAt(it.Node, it.Path, "this host has no device %s", u.Dev)
						continue
					}
				}
				used[u.Dev] = it.Path
				p.Via = append(p.Via, u)
				continue
			}
			u := SpreadUplink{Dev: it.Map.String("dev", "")}
			checkDev(it.Map, "dev", u.Dev, "uplink")
			if it.Map.Has("gateway") {
				g := it.Map.String("gateway", "")
				a, err := netip.ParseAddr(g)
				switch {
				case it.Map.Failed("gateway"):
				case err != nil:
					it.Map.Errorf("gateway", "%q is not an IP address", g)
				case !a.Is4():
					it.Map.Errorf("gateway", "%s is not an IPv4 address (spreading is IPv4 only)", a)
				default:
					u.Gateway = a
				}
			}
			it.Map.Done()
			p.Via = append(p.Via, u)
		}
		if m.Has("mark_base") {
			s := m.String("mark_base", "")
			v, err := strconv.ParseUint(s, 0, 32)
			switch {
			case m.Failed("mark_base"):
			case err != nil || v == 0:
				m.Errorf("mark_base", "%q is not a packet mark (a number above 0, e.g. 0x5350)", s)
			case v+uint64(len(p.Via)) > 1<<32-1:
				m.Errorf("mark_base", "%s + %d uplinks does not fit in a 32-bit mark", s, len(p.Via))
			default:
				p.MarkBase = uint32(v)
			}
		}
		p.TableBase = m.Int("table_base", p.TableBase, 1, 1<<31-1-SpreadMaxUplinks)
		for i := range p.Via {
			// 253–255 are the kernel's default, main and local tables.
			if t := p.TableBase + i; t >= 253 && t <= 255 && !m.Failed("table_base") {
				m.Errorf("table_base", "table %d (uplink %d) is one of the kernel's own tables (253 default, 254 main, 255 local)", t, i+1)
				break
			}
		}
		// Below the main table's rule (32766), so that a marked packet
		// takes its uplink's table first.
		p.Priority = m.Int("priority", p.Priority, 1, 32765)
		return p
	})
}

// Name is "spread".
func (p *Spread) Name() string { return "spread" }

// Decide returns nothing: the decisions are made per packet in the
// datapath (see the type's comment).
func (p *Spread) Decide(*Snapshot) []Action { return nil }

// SetDatapath gives the policy what reports the installed datapath's
// counters (nil: none is installed).
func (p *Spread) SetDatapath(stats func() any) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.datapath = stats
}

// SpreadStatus is the policy's status: its configuration and, once the
// datapath is installed, what it counted per uplink.
type SpreadStatus struct {
	From      []string `json:"from"`
	Via       []string `json:"via"`
	Installed bool     `json:"installed"`
	// Datapath is the program's counters (see spread.Stats): per uplink
	// flows (new connections from VMs), joins (their further subflows),
	// learned (subflows remote hosts opened) and packets marked.
	Datapath any `json:"datapath,omitempty"`
}

// Status reports the configuration and the datapath's counters.
func (p *Spread) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := SpreadStatus{From: p.From}
	for _, u := range p.Via {
		s := u.Dev
		if u.Gateway.IsValid() {
			s += " via " + u.Gateway.String()
		}
		st.Via = append(st.Via, s)
	}
	if p.datapath != nil {
		st.Installed = true
		st.Datapath = p.datapath()
	}
	return st
}

// String describes the policy for logs.
func (p *Spread) String() string {
	var via []string
	for _, u := range p.Via {
		via = append(via, u.Dev)
	}
	return fmt.Sprintf("spread from %s over %s", strings.Join(p.From, ", "), strings.Join(via, ", "))
}
