package config

import (
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"sort"
	"strings"

	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
	"mpsteer/internal/yamlcfg"
)

// The config's mode section says what the user wants in the terms people
// know, and expands into the existing policies before they are built:
//
//	mode:
//	  service: handover            # Apple's service types: handover | interactive | aggregate
//	  interfaces: {wlan0: master, wwan0: backup, usb0: off, eth0: on}   # OpenMPTCProuter's modes
//	  allow: [wlan0, wwan0, eth0]  # only these carry subflows (default: every interface)
//	  deny: [docker0]              # never these
//
// docs/daemon.md ("Presets") says precisely what each expands into.

// Services (mode.service) and per-interface modes (mode.interfaces).
const (
	ServiceHandover    = "handover"
	ServiceInteractive = "interactive"
	ServiceAggregate   = "aggregate"

	IfaceOn     = "on"
	IfaceOff    = "off"
	IfaceBackup = "backup"
	IfaceMaster = "master"
)

// InteractiveK is δ's factor for the interactive service: the prefer
// policy keeps the earliest-listed path whose RTT is within 25% of the
// connection's lowest, so data takes the lowest-latency path and two
// paths of about the same RTT do not flap.
const InteractiveK = 1.25

var ifaceNameRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

// modeEndpoints lists the kernel path manager's endpoints, to check that
// an interface that is off has none that would open subflows on it (a
// variable so that tests can stand in for the kernel).
var modeEndpoints = func() ([]pm.Endpoint, error) {
	c, err := pm.Dial(pm.Options{})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	return c.Endpoints()
}

// modeIfIndex resolves an interface name to its index (for endpoints that
// name their device); a variable for tests.
var modeIfIndex = func(name string) int {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return 0
	}
	return ifi.Index
}

// addMode expands the config's mode section into policy entries, placed
// before the policies the config lists (the first policy with an opinion
// on a subflow decides: the user's modes come first). seen collects the
// policy names, as for listed policies.
func (cfg *Config) addMode(m *yamlcfg.Map, env policy.Env, seen map[string]bool) {
	mm := m.Map("mode")
	if mm == nil {
		return
	}
	entries := expandMode(m, mm, env)
	mm.Done()
	if len(entries) == 0 {
		return
	}
	// Built from generated text: a problem there would be a bug of the
	// expansion, reported at the mode section all the same.
	var b strings.Builder
	b.WriteString("policies:\n")
	for _, e := range entries {
		b.WriteString("  - " + e + "\n")
	}
	src := fmt.Sprintf("%s:%d: mode (expanded)", m.File(), mm.Line())
	gen, err := yamlcfg.Parse(src, []byte(b.String()))
	if err != nil {
		m.Errorf("mode", "%v", err)
		return
	}
	for _, it := range gen.List("policies") {
		p := policy.Build(it.Map, env)
		if p == nil {
			continue
		}
		seen[p.Name()] = true
		cfg.addPolicy(p, "mode: "+it.Map.Canonical(), fmt.Sprintf("%s (%s)", m.Where("mode"), p.Name()))
	}
	gen.Done()
	if err := gen.Err(); err != nil {
		m.Errorf("mode", "%v", err)
	}
}

// expandMode checks the mode section and returns the policy entries it
// stands for, as YAML flow mappings.
func expandMode(root, mm *yamlcfg.Map, env policy.Env) []string {
	service := mm.Enum("service", "", ServiceHandover, ServiceInteractive, ServiceAggregate)
	var known map[string][]netip.Addr
	if env.Interfaces != nil {
		known = env.Interfaces()
	}
	checkName := func(key, n string) bool {
		if !ifaceNameRE.MatchString(n) {
			mm.Errorf(key, "%q is not an interface name", n)
			return false
		}
		if known != nil {
			if _, ok := known[n]; !ok {
				if env.Addrs != nil {
					if _, ok := env.Addrs(n); ok {
						return true // a device that is down or has no address yet
					}
				}
				mm.Errorf(key, "%q is not an interface of this host (interfaces with an address: %s)", n, strings.Join(sortedKeys(known), ", "))
				return false
			}
		}
		return true
	}
	modes := map[string]string{}
	var order []string // interfaces in the order mode.interfaces names them
	if im := mm.Map("interfaces"); im != nil {
		for _, n := range im.Keys() {
			v := im.Enum(n, IfaceOn, IfaceOn, IfaceOff, IfaceBackup, IfaceMaster)
			if im.Failed(n) || !checkName("interfaces", n) {
				continue
			}
			modes[n] = v
			order = append(order, n)
		}
		im.Done()
	}
	allow := mm.Strings("allow")
	deny := mm.Strings("deny")
	denied := map[string]bool{}
	for _, n := range deny {
		if checkName("deny", n) {
			denied[n] = true
		}
	}
	allowed := map[string]bool{}
	for _, n := range allow {
		if !checkName("allow", n) {
			continue
		}
		allowed[n] = true
		if denied[n] {
			mm.Errorf("deny", "%q is both allowed and denied: pick one", n)
		}
	}
	// An interface is usable unless it is off, denied, or left out of an
	// allow list.
	usable := func(n string) bool {
		return modes[n] != IfaceOff && !denied[n] && (len(allow) == 0 || allowed[n])
	}
	for _, n := range order {
		if (modes[n] == IfaceBackup || modes[n] == IfaceMaster) && !usable(n) {
			why := "denied"
			if !denied[n] {
				why = "not in the allow list"
			}
			mm.Errorf("interfaces", "%s is %s but %s: it can carry no subflow", n, modes[n], why)
		}
	}
	pick := func(want string) []string {
		var out []string
		for _, n := range order {
			if modes[n] == want && usable(n) {
				out = append(out, n)
			}
		}
		return out
	}
	masters, backups := pick(IfaceMaster), pick(IfaceBackup)

	// Which interfaces the prefer policy ranks, if any.
	var preferred []string
	k := ""
	switch service {
	case ServiceHandover:
		preferred = masters
		if len(preferred) == 0 {
			for _, n := range allow {
				if usable(n) && modes[n] != IfaceBackup {
					preferred = []string{n}
					break
				}
			}
		}
		if len(preferred) == 0 {
			mm.Errorf("service", "handover needs a primary interface: mark one master in interfaces, or list allow in order (the first is the primary)")
		}
		if len(preferred) > 1 {
			mm.Errorf("service", "handover has one primary interface, and %s are all master: mark one master, the others on", strings.Join(preferred, ", "))
		}
	case ServiceInteractive:
		// Every usable interface but the backup ones, masters first,
		// then in the order the section names them.
		add := func(n string) {
			for _, p := range preferred {
				if p == n {
					return
				}
			}
			if usable(n) && modes[n] != IfaceBackup {
				preferred = append(preferred, n)
			}
		}
		for _, n := range masters {
			add(n)
		}
		for _, n := range order {
			add(n)
		}
		for _, n := range allow {
			add(n)
		}
		if len(preferred) == 0 {
			for _, n := range sortedKeys(known) {
				add(n)
			}
		}
		if len(preferred) == 0 && known != nil {
			mm.Errorf("service", "interactive finds no interface to prefer (every one is off, denied or backup)")
		}
		k = fmt.Sprint(InteractiveK)
	case ServiceAggregate:
		if len(masters) > 0 {
			mm.Errorf("interfaces", "%s is master, but aggregate uses every interface at once (master would make the others backup): use on", strings.Join(masters, ", "))
		}
	default:
		preferred = masters
	}

	// Policies the config lists by name must not clash with the ones the
	// mode builds.
	listed := map[string]int{}
	for i, it := range root.List("policies") {
		if it.Map != nil {
			if n := yamlcfg.RawNode(it.Map, "name"); n != nil {
				listed[n.Value] = i
			}
		}
	}
	clash := func(name, key, why string) bool {
		if i, ok := listed[name]; ok {
			mm.Errorf(key, "%s builds a %s policy, and policies[%d] is one too: tune it there and drop this part of mode, or drop policies[%d]", why, name, i, i)
			return true
		}
		return false
	}

	var out []string
	if len(backups) > 0 && !clash("backup", "interfaces", "interfaces: backup") {
		out = append(out, fmt.Sprintf("{name: backup, paths: [%s]}", strings.Join(backups, ", ")))
	}
	if len(preferred) > 0 {
		key, what := "interfaces", "interfaces: master"
		if service != "" {
			key, what = "service", "service: "+service
		}
		if !clash("prefer", key, what) {
			e := fmt.Sprintf("{name: prefer, paths: [%s]", strings.Join(preferred, ", "))
			if k != "" {
				e += ", k: " + k
			}
			out = append(out, e+"}")
		}
	}

	// Which interfaces carry subflows: under the userspace path manager the
	// daemon opens them (fullmesh, one per address pair); under the kernel
	// path manager its endpoints do, and an interface that is off must
	// have none that would.
	var off []string
	for _, n := range order {
		if !usable(n) {
			off = append(off, n)
		}
	}
	for _, n := range deny {
		if modes[n] == "" {
			off = append(off, n)
		}
	}
	switch env.PathManager {
	case policy.UserspacePM:
		if !clash("fullmesh", "allow", "the mode (under the userspace path manager, which opens subflows)") {
			e := "{name: fullmesh, subflows_per_pair: 1"
			if len(allow) > 0 {
				var in []string
				for _, n := range allow {
					if usable(n) {
						in = append(in, n)
					}
				}
				e += ", interfaces: [" + strings.Join(in, ", ") + "]"
			}
			var ex []string
			for _, n := range off {
				if len(allow) == 0 || allowed[n] {
					ex = append(ex, n)
				}
			}
			if len(ex) > 0 {
				e += ", exclude: [" + strings.Join(ex, ", ") + "]"
			}
			out = append(out, e+"}")
		}
	case policy.KernelPM:
		keyFor := func(n string) string {
			switch {
			case modes[n] == IfaceOff:
				return "interfaces"
			case denied[n]:
				return "deny"
			}
			return "allow"
		}
		checkKernelEndpoints(mm, known, usable, off, len(allow) > 0, keyFor, env)
	}
	return out
}

// checkKernelEndpoints refuses, under the kernel path manager, an
// endpoint that would open subflows (or have them opened, signal) on an
// interface that may carry none.
func checkKernelEndpoints(mm *yamlcfg.Map, known map[string][]netip.Addr, usable func(string) bool, off []string, hasAllow bool, keyFor func(string) string, env policy.Env) {
	if len(off) == 0 && !hasAllow {
		return
	}
	eps, err := modeEndpoints()
	if err != nil {
		mm.Errorf("interfaces", "cannot read the kernel path manager's endpoints to check the interfaces that are off: %v", err)
		return
	}
	byAddr := map[netip.Addr]string{}
	for n, addrs := range known {
		for _, a := range addrs {
			byAddr[a] = n
		}
	}
	for _, n := range off {
		if idx := modeIfIndex(n); idx > 0 {
			for _, e := range eps {
				if int(e.IfIndex) == idx {
					if _, ok := byAddr[e.Addr]; !ok {
						byAddr[e.Addr] = n
					}
				}
			}
		}
	}
	for _, e := range eps {
		if e.Flags&(pm.FlagSubflow|pm.FlagSignal|pm.FlagFullmesh) == 0 {
			continue
		}
		n, ok := byAddr[e.Addr.Unmap()]
		if !ok || usable(n) {
			continue
		}
		mm.Errorf(keyFor(n), "%s may carry no subflow, but the kernel path manager's endpoint %d (%s, %s) opens them there: remove it (ip mptcp endpoint delete id %d) or run the userspace path manager (sysctl %s)",
			n, e.ID, e.Addr, e.Flags, e.ID, env.UserspacePMSetting())
	}
}

func sortedKeys(m map[string][]netip.Addr) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
