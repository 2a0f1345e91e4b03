package spread

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// MaxUplinks is the most uplinks the program spreads over.
const MaxUplinks = 16

// Defaults of Config's routing numbers.
const (
	DefaultMarkBase  = 0x5350
	DefaultTableBase = 5350
	DefaultPriority  = 5350
)

// Uplink is one physical link flows may leave by.
type Uplink struct {
	Dev string
	// Gateway is the next hop on Dev (invalid: Dev is point to point and
	// the route needs none).
	Gateway netip.Addr
}

// Config is what Install sets up in the calling process's network
// namespace.
type Config struct {
	// From are the VM-facing devices (a bridge, or the VMs' tap/veth
	// devices): new MPTCP subflows entering the host there are spread.
	From []string
	// Uplinks, in the order the round-robin takes them.
	Uplinks []Uplink
	// Uplink i is marked MarkBase+i and routed by table TableBase+i, by a
	// rule of priority Priority.
	MarkBase  uint32
	TableBase int
	Priority  int
}

// Mark is uplink i's packet mark.
func (c Config) Mark(i int) uint32 { return c.MarkBase + uint32(i) }

// Table is uplink i's routing table.
func (c Config) Table(i int) int { return c.TableBase + i }

// Spread is the installed datapath: the programs, their TCX links, the
// policy rules and the per-uplink routes. Close removes all of it. The TCX
// links live as long as the process: when it dies, the programs come off
// the devices and the hypervisor's own routes carry everything (the rules
// stay behind, harmless: nothing sets their marks any more; the next
// Install with the same numbers replaces them).
type Spread struct {
	mu      sync.Mutex
	cfg     Config
	objs    spreadObjects
	links   []link.Link
	rules   []*netlink.Rule
	routes  []*netlink.Route
	ifindex []int  // per uplink
	alive   []bool // per uplink, as last written to the program
	// Warnings are things about the host that keep spreading from
	// working as it should (rp_filter, forwarding), found at Install.
	Warnings []string
}

// UplinkStats is what the program counted for one uplink.
type UplinkStats struct {
	Dev     string `json:"dev"`
	Gateway string `json:"gateway,omitempty"`
	Mark    string `json:"mark"`
	Table   int    `json:"table"`
	Alive   bool   `json:"alive"`
	// Flows: new MPTCP connections (MP_CAPABLE SYNs) from VMs assigned to
	// it; Joins: further subflows (MP_JOIN SYNs); Learned: subflows remote
	// hosts opened that came in on it (the VM's replies leave by it);
	// Packets: packets from VMs marked for it.
	Flows   uint64 `json:"flows"`
	Joins   uint64 `json:"joins"`
	Learned uint64 `json:"learned"`
	Packets uint64 `json:"packets"`
}

// Stats is the program's state, for status.
type Stats struct {
	From    []string      `json:"from"`
	Uplinks []UplinkStats `json:"uplinks"`
	// Counters are SYNs left alone: not_mptcp (TCP without MP_CAPABLE or
	// MP_JOIN), not_via_uplink (the destination is not behind an uplink),
	// no_live_uplink (every uplink was down).
	Counters map[string]uint64 `json:"counters"`
}

var counterNames = []string{"not_mptcp", "not_via_uplink", "no_live_uplink"}

// Check validates a config without touching the host.
func (c Config) Check() error {
	if len(c.From) == 0 {
		return errors.New("no VM-facing device (from) given")
	}
	if len(c.Uplinks) < 2 || len(c.Uplinks) > MaxUplinks {
		return fmt.Errorf("%d uplinks given; spreading needs 2 to %d", len(c.Uplinks), MaxUplinks)
	}
	seen := map[string]bool{}
	for _, d := range c.From {
		if seen[d] {
			return fmt.Errorf("device %s is named twice", d)
		}
		seen[d] = true
	}
	for _, u := range c.Uplinks {
		if seen[u.Dev] {
			return fmt.Errorf("device %s is named twice", u.Dev)
		}
		seen[u.Dev] = true
		if u.Gateway.IsValid() && !u.Gateway.Is4() {
			return fmt.Errorf("uplink %s: gateway %s is not an IPv4 address (spreading is IPv4 only)", u.Dev, u.Gateway)
		}
	}
	return nil
}

// Install loads the programs, adds the routes and rules and attaches the
// programs, in the calling process's network namespace (its thread's, for
// the TCX attachment). It is all or nothing: on any error what it did is
// undone.
func Install(cfg Config) (s *Spread, err error) {
	if err := cfg.Check(); err != nil {
		return nil, err
	}
	s = &Spread{cfg: cfg}
	defer func() {
		if err != nil {
			s.Close()
			s = nil
		}
	}()
	from := make([]int, len(cfg.From))
	for i, d := range cfg.From {
		l, err := netlink.LinkByName(d)
		if err != nil {
			return s, fmt.Errorf("VM-facing device %s: %w", d, err)
		}
		from[i] = l.Attrs().Index
	}
	var upLinks []netlink.Link
	for _, u := range cfg.Uplinks {
		l, err := netlink.LinkByName(u.Dev)
		if err != nil {
			return s, fmt.Errorf("uplink %s: %w", u.Dev, err)
		}
		upLinks = append(upLinks, l)
		s.ifindex = append(s.ifindex, l.Attrs().Index)
		s.alive = append(s.alive, isAlive(l))
	}
	spec, err := loadSpread()
	if err != nil {
		return s, err
	}
	if err := spec.Variables["n_uplinks"].Set(uint32(len(cfg.Uplinks))); err != nil {
		return s, err
	}
	if err := spec.Variables["mark_base"].Set(cfg.MarkBase); err != nil {
		return s, err
	}
	if err := spec.LoadAndAssign(&s.objs, nil); err != nil {
		return s, fmt.Errorf("load the spread program: %w", bpfutil.VerifierDetail(err))
	}
	for i := range cfg.Uplinks {
		if err := s.writeUplink(i); err != nil {
			return s, err
		}
	}
	// Routes and rules: stale ones of a daemon that was killed (same
	// numbers) are replaced, never duplicated.
	for i, u := range cfg.Uplinks {
		rt := uplinkRoute(upLinks[i], u, cfg.Table(i))
		if err := netlink.RouteReplace(rt); err != nil {
			return s, fmt.Errorf("uplink %s: route %s in table %d: %w", u.Dev, describeRoute(u), cfg.Table(i), err)
		}
		s.routes = append(s.routes, rt)
	}
	for i, u := range cfg.Uplinks {
		r := uplinkRule(cfg, i)
		deleteRules(r)
		if err := netlink.RuleAdd(r); err != nil {
			return s, fmt.Errorf("uplink %s: rule fwmark %#x table %d: %w", u.Dev, cfg.Mark(i), cfg.Table(i), err)
		}
		s.rules = append(s.rules, r)
	}
	// Uplinks first: a subflow a remote host opens is learned before the
	// VM answers it.
	for i, u := range cfg.Uplinks {
		if err := s.attach(s.objs.SpreadUplink, s.ifindex[i], u.Dev); err != nil {
			return s, err
		}
	}
	for i, d := range cfg.From {
		if err := s.attach(s.objs.SpreadFrom, from[i], d); err != nil {
			return s, err
		}
	}
	s.Warnings = hostWarnings(cfg)
	return s, nil
}

func describeRoute(u Uplink) string {
	if u.Gateway.IsValid() {
		return "default via " + u.Gateway.String() + " dev " + u.Dev
	}
	return "default dev " + u.Dev
}

func uplinkRoute(l netlink.Link, u Uplink, table int) *netlink.Route {
	rt := &netlink.Route{LinkIndex: l.Attrs().Index, Table: table, Dst: &net.IPNet{IP: net.IPv4zero, Mask: net.CIDRMask(0, 32)}}
	if u.Gateway.IsValid() {
		rt.Gw = net.IP(u.Gateway.AsSlice())
	} else {
		rt.Scope = netlink.SCOPE_LINK
	}
	return rt
}

func uplinkRule(cfg Config, i int) *netlink.Rule {
	r := netlink.NewRule()
	r.Family = netlink.FAMILY_V4
	r.Mark = cfg.Mark(i)
	r.Table = cfg.Table(i)
	r.Priority = cfg.Priority
	return r
}

// deleteRules removes every rule with r's priority, mark and table.
func deleteRules(r *netlink.Rule) {
	rules, err := netlink.RuleList(netlink.FAMILY_V4)
	if err != nil {
		return
	}
	for i := range rules {
		o := &rules[i]
		if o.Priority == r.Priority && o.Mark == r.Mark && o.Table == r.Table {
			_ = netlink.RuleDel(o)
		}
	}
}

func (s *Spread) attach(prog *ebpf.Program, ifindex int, dev string) error {
	l, err := link.AttachTCX(link.TCXOptions{Interface: ifindex, Program: prog, Attach: ebpf.AttachTCXIngress, Anchor: link.Head()})
	if err != nil {
		return fmt.Errorf("attach the spread program at TCX ingress of %s: %w", dev, err)
	}
	s.links = append(s.links, l)
	return nil
}

func (s *Spread) writeUplink(i int) error {
	v := spreadUplink{Ifindex: uint32(s.ifindex[i])}
	if s.alive[i] {
		v.Alive = 1
	}
	return s.objs.Uplinks.Put(uint32(i), &v)
}

func isAlive(l netlink.Link) bool {
	a := l.Attrs()
	return a.Flags&net.FlagUp != 0 && a.OperState != netlink.OperDown && a.OperState != netlink.OperLowerLayerDown
}

// Sync follows the uplinks' state: one that went down is skipped by new
// flows (flows already on it stay), and one that came back gets its
// route again (the kernel drops routes through a device taken down). It
// returns what changed, for the log.
func (s *Spread) Sync() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for i, u := range s.cfg.Uplinks {
		l, err := netlink.LinkByIndex(s.ifindex[i])
		up := err == nil && isAlive(l)
		if up == s.alive[i] {
			continue
		}
		s.alive[i] = up
		if err := s.writeUplink(i); err != nil {
			out = append(out, fmt.Sprintf("uplink %s: %v", u.Dev, err))
			continue
		}
		if !up {
			out = append(out, fmt.Sprintf("uplink %s is down: new subflows skip it", u.Dev))
			continue
		}
		msg := fmt.Sprintf("uplink %s is up again: new subflows take it", u.Dev)
		if err := netlink.RouteReplace(s.routes[i]); err != nil {
			msg += fmt.Sprintf(" (its route could not be restored: %v)", err)
		}
		out = append(out, msg)
	}
	return out
}

// Stats reads the program's counters.
func (s *Spread) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Stats{From: append([]string(nil), s.cfg.From...), Counters: map[string]uint64{}}
	for i, u := range s.cfg.Uplinks {
		us := UplinkStats{Dev: u.Dev, Mark: fmt.Sprintf("%#x", s.cfg.Mark(i)), Table: s.cfg.Table(i), Alive: s.alive[i]}
		if u.Gateway.IsValid() {
			us.Gateway = u.Gateway.String()
		}
		var per []spreadUplinkStats
		if err := s.objs.Stats.Lookup(uint32(i), &per); err == nil {
			for _, p := range per {
				us.Flows += p.Flows
				us.Joins += p.Joins
				us.Learned += p.Learned
				us.Packets += p.Packets
			}
		}
		st.Uplinks = append(st.Uplinks, us)
	}
	for i, n := range counterNames {
		var per []uint64
		if err := s.objs.Counters.Lookup(uint32(i), &per); err == nil {
			var sum uint64
			for _, v := range per {
				sum += v
			}
			st.Counters[n] = sum
		}
	}
	return st
}

// Close detaches the programs and removes the rules and routes.
func (s *Spread) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var errs error
	for _, l := range s.links {
		errs = errors.Join(errs, l.Close())
	}
	s.links = nil
	for _, r := range s.rules {
		if err := netlink.RuleDel(r); err != nil && !errors.Is(err, unix.ENOENT) {
			errs = errors.Join(errs, fmt.Errorf("rule fwmark %#x table %d: %w", r.Mark, r.Table, err))
		}
	}
	s.rules = nil
	for _, rt := range s.routes {
		if err := netlink.RouteDel(rt); err != nil && !errors.Is(err, unix.ESRCH) && !errors.Is(err, unix.ENOENT) {
			errs = errors.Join(errs, fmt.Errorf("route in table %d: %w", rt.Table, err))
		}
	}
	s.routes = nil
	return errors.Join(errs, s.objs.Close())
}

// hostWarnings names settings of the host that defeat spreading.
func hostWarnings(cfg Config) []string {
	var out []string
	if v := sysctl("net/ipv4/ip_forward"); v == "0" {
		out = append(out, "net.ipv4.ip_forward is 0: this host does not forward, so no VM flow is spread")
	}
	all, _ := strconv.Atoi(sysctl("net/ipv4/conf/all/rp_filter"))
	for _, u := range cfg.Uplinks {
		dev, _ := strconv.Atoi(sysctl("net/ipv4/conf/" + u.Dev + "/rp_filter"))
		if max(all, dev) == 1 {
			out = append(out, fmt.Sprintf("strict reverse-path filtering on %s (rp_filter 1) drops replies that come back on it while the route to their source is another uplink; set net.ipv4.conf.%s.rp_filter=2 (loose)", u.Dev, u.Dev))
		}
	}
	return out
}

func sysctl(path string) string {
	b, err := os.ReadFile("/proc/sys/" + path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}
