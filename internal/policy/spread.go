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

// SpreadConfig is what spread reads of its config entry; the policy's
// own fields (From, Via, MarkBase, TableBase, Priority) are what the
// daemon installs.
type SpreadConfig struct {
	// From are the VM-facing devices.
	From []string `yaml:"from"`
	// Via are the uplinks, in round-robin order.
	Via spreadVia `yaml:"via"`
	// MarkBase, TableBase, Priority: uplink i is marked MarkBase+i and
	// routed by table TableBase+i, by a rule of priority Priority (below
	// the main table's rule, 32766, so that a marked packet takes its
	// uplink's table first).
	MarkBase  spreadMark `yaml:"mark_base"`
	TableBase int        `yaml:"table_base" min:"1" max:"2147483631"` // 1<<31-1 - SpreadMaxUplinks
	Priority  int        `yaml:"priority" min:"1" max:"32765"`
}

// spreadVia is the uplinks as written: a mapping {dev, gateway} each, or
// a device name alone for a point-to-point link; at says where each was
// written, for the checks that need the host (spreadDevices).
type spreadVia struct {
	uplinks []SpreadUplink
	// where each uplink's device was named (its key path), and how to
	// report a problem with it there
	where []string
	say   []func(format string, args ...any)
	// fixed: the uplink stays in the policy even when its device is
	// wrong (a mapping: its problem is reported, nothing is applied)
	fixed []bool
}

func (v *spreadVia) DecodeField(m *yamlcfg.Map, key string) {
	items := m.List(key)
	switch {
	case !m.Has(key):
		m.Errorf(key, "name the uplinks to spread over (via: [{dev: phy1, gateway: 10.0.1.2}, {dev: phy2, gateway: 10.0.2.2}])")
	case len(items) < 2 && !m.Failed(key):
		m.Errorf(key, "%d uplink given; spreading needs at least 2", len(items))
	case len(items) > SpreadMaxUplinks:
		m.Errorf(key, "%d uplinks given; at most %d are supported", len(items), SpreadMaxUplinks)
	}
	for _, it := range items {
		if it.Map == nil {
			// A bare device name: a point-to-point uplink.
			if it.Scalar == "" || !spreadDevRE.MatchString(it.Scalar) {
				m.ErrorAt(it.Node, it.Path, "an uplink is a mapping such as {dev: phy1, gateway: 10.0.1.2} (or a device name alone for a point-to-point link)")
				continue
			}
			v.uplinks = append(v.uplinks, SpreadUplink{Dev: it.Scalar})
			v.where = append(v.where, it.Path)
			v.say = append(v.say, func(format string, args ...any) { m.ErrorAt(it.Node, it.Path, format, args...) })
			v.fixed = append(v.fixed, false)
			continue
		}
		var u spreadUplinkConfig
		yamlcfg.Decode(it.Map, &u)
		up := SpreadUplink{Dev: u.Dev}
		if it.Map.Has("gateway") && !it.Map.Failed("gateway") {
			a, err := netip.ParseAddr(u.Gateway)
			switch {
			case err != nil:
				it.Map.Errorf("gateway", "%q is not an IP address", u.Gateway)
			case !a.Is4():
				it.Map.Errorf("gateway", "%s is not an IPv4 address (spreading is IPv4 only)", a)
			default:
				up.Gateway = a
			}
		}
		it.Map.Done()
		mm := it.Map
		v.uplinks = append(v.uplinks, up)
		v.where = append(v.where, mm.Path()+".dev")
		v.say = append(v.say, func(format string, args ...any) { mm.Errorf("dev", format, args...) })
		v.fixed = append(v.fixed, true)
	}
}

// spreadUplinkConfig is one uplink written as a mapping.
type spreadUplinkConfig struct {
	Dev     string `yaml:"dev"`
	Gateway string `yaml:"gateway"`
}

// spreadMark is a packet mark above 0, in any base strconv reads (0x5350).
type spreadMark uint32

func (sm *spreadMark) DecodeField(m *yamlcfg.Map, key string) {
	if !m.Has(key) {
		return
	}
	s := m.String(key, "")
	v, err := strconv.ParseUint(s, 0, 32)
	switch {
	case m.Failed(key):
	case err != nil || v == 0:
		m.Errorf(key, "%q is not a packet mark (a number above 0, e.g. 0x5350)", s)
	default:
		*sm = spreadMark(v)
	}
}

func buildSpread(m *yamlcfg.Map, env Env) Policy {
	cfg := SpreadConfig{MarkBase: SpreadDefaultMarkBase, TableBase: SpreadDefaultTableBase, Priority: SpreadDefaultPriority}
	yamlcfg.Decode(m, &cfg)
	p := &Spread{From: cfg.From, MarkBase: uint32(cfg.MarkBase), TableBase: cfg.TableBase, Priority: cfg.Priority,
		Where: fmt.Sprintf("%s:%d: %s", m.File(), m.Line(), m.Path())}
	used := map[string]string{} // device → the key that named it
	// checkDev says what is wrong with a device named at where (by say).
	checkDev := func(dev, what, where string, say func(string, ...any)) bool {
		switch {
		case dev == "":
			say("name the %s device", what)
		case !spreadDevRE.MatchString(dev):
			say("%q is not a device name", dev)
		case used[dev] != "":
			say("device %s is named twice (also in %s): a device is either VM-facing (from) or an uplink (via), once", dev, used[dev])
		default:
			if env.Addrs != nil {
				if _, ok := env.Addrs(dev); !ok {
					say("this host has no device %s", dev)
					return false
				}
			}
			used[dev] = where
			return true
		}
		return false
	}
	if !m.Has("from") {
		m.Errorf("from", "name the VM-facing devices whose VMs' subflows are spread (from: [vmbr0], a bridge or the VMs' tap/veth devices)")
	}
	for _, d := range p.From {
		checkDev(d, "VM-facing", m.Path()+".from", func(f string, a ...any) { m.Errorf("from", f, a...) })
	}
	if m.Has("from") && len(p.From) == 0 && !m.Failed("from") {
		m.Errorf("from", "name at least one VM-facing device")
	}
	for i, u := range cfg.Via.uplinks {
		if checkDev(u.Dev, "uplink", cfg.Via.where[i], cfg.Via.say[i]) || cfg.Via.fixed[i] {
			p.Via = append(p.Via, u)
		}
	}
	if m.Has("mark_base") && !m.Failed("mark_base") && uint64(p.MarkBase)+uint64(len(p.Via)) > 1<<32-1 {
		m.Errorf("mark_base", "%s + %d uplinks does not fit in a 32-bit mark", m.String("mark_base", ""), len(p.Via))
	}
	for i := range p.Via {
		// 253–255 are the kernel's default, main and local tables.
		if t := p.TableBase + i; t >= 253 && t <= 255 && !m.Failed("table_base") {
			m.Errorf("table_base", "table %d (uplink %d) is one of the kernel's own tables (253 default, 254 main, 255 local)", t, i+1)
			break
		}
	}
	return p
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
