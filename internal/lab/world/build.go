package world

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/scenario"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
	"mpsteer/internal/timescale"
)

// StateRoot holds one directory per running lab.
var StateRoot = "/run/mpsteer/lab"

// World is a built lab: its plan plus what is running.
type World struct {
	Plan
	Dir         string            `json:"state_dir"`
	EmulatorPID int               `json:"emulator_pid"`
	CC          map[string]string `json:"cc"` // congestion control per host, as the kernel reports it
}

// Summary is the shape `mpsteer lab up --json` prints; scripts build on it.
type Summary struct {
	Name     string                 `json:"name"`
	Scenario string                 `json:"scenario"`
	Variant  string                 `json:"variant"`
	Hosts    map[string]HostSummary `json:"hosts"`
	Paths    []PathInfo             `json:"paths"`
	StateDir string                 `json:"state_dir"`
	Emulator int                    `json:"emulator_pid"`
	// Spread and CoreLinks describe the core, when there is one.
	Spread    string         `json:"spread,omitempty"`
	CoreLinks []CoreLinkInfo `json:"core_links,omitempty"`
	// Tenants describes a tenants world.
	Tenants *TenantsInfo `json:"tenants,omitempty"`
}

// HostSummary names a host's namespace.
type HostSummary struct {
	NetNS string `json:"netns"`
	CC    string `json:"cc,omitempty"`
}

// Summary returns the printable description.
func (w *World) Summary() Summary {
	s := Summary{Name: w.Name, Scenario: w.Scenario, Variant: w.Variant, Hosts: map[string]HostSummary{},
		Paths: w.Paths, StateDir: w.Dir, Emulator: w.EmulatorPID, Spread: string(w.Spread), CoreLinks: w.CoreLinks, Tenants: w.Tenants}
	for _, h := range w.Hosts {
		s.Hosts[h.Role] = HostSummary{NetNS: h.NetNS, CC: w.CC[h.Role]}
	}
	return s
}

// Options tune Up.
type Options struct {
	// Binary is the mpsteer executable that runs the emulator (default:
	// this process's own executable).
	Binary string
}

// Preflight explains, before anything is created, why a lab cannot run.
func Preflight() error {
	if os.Geteuid() != 0 {
		return errors.New("the lab needs root (it creates network namespaces and TUN devices); run it as root, e.g. with sudo")
	}
	if _, err := os.Stat("/proc/sys/net/mptcp/enabled"); err != nil {
		return errors.New("this kernel has no MPTCP (/proc/sys/net/mptcp/enabled is missing; CONFIG_MPTCP is needed)")
	}
	if _, err := os.Stat("/dev/net/tun"); err != nil {
		return errors.New("/dev/net/tun is missing: the lab's link emulator needs the tun driver")
	}
	if _, err := exec.LookPath("ip"); err != nil {
		return errors.New("the ip command (iproute2) is missing; `make deps` installs it")
	}
	return nil
}

// Up builds the world described by plan. On any error, everything it made
// is removed again.
func Up(ctx context.Context, plan *Plan, o Options) (w *World, err error) {
	if err := Preflight(); err != nil {
		return nil, err
	}
	if err := kernelFeatures(plan); err != nil {
		return nil, err
	}
	dir := filepath.Join(StateRoot, plan.Name)
	if err := os.MkdirAll(StateRoot, 0o755); err != nil {
		return nil, err
	}
	if err := os.Mkdir(dir, 0o755); err != nil {
		if errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("a lab named %q already exists; remove it with `mpsteer lab down %s`", plan.Name, plan.Name)
		}
		return nil, err
	}
	w = &World{Plan: *plan, Dir: dir, CC: map[string]string{}}
	defer func() {
		if err != nil {
			w.Down()
			w = nil
		}
	}()
	if err := writeJSON(filepath.Join(dir, "plan.json"), plan); err != nil {
		return w, err
	}
	parent, err := hashParent(plan.Name)
	if err != nil {
		return w, err
	}
	for _, h := range plan.Hosts {
		if netnsutil.Exists(h.NetNS) {
			return w, fmt.Errorf("network namespace %s already exists (left over from a crash? `mpsteer lab down --all` removes it)", h.NetNS)
		}
		if err := netnsutil.Do(parent, func() error { return netnsutil.Create(h.NetNS) }); err != nil {
			return w, err
		}
		if err := applySysctls(h); err != nil {
			return w, err
		}
	}
	// Bridges before the veths that are their ports.
	for _, b := range plan.Bridges {
		if err := w.makeBridge(b); err != nil {
			return w, err
		}
	}
	// Veths first: the emulator attaches the pinning program (pinned
	// spread) to devices of both kinds when it starts.
	for _, v := range plan.Veths {
		if err := w.makeVeth(v); err != nil {
			return w, err
		}
	}
	if err := w.startEmulator(ctx, o); err != nil {
		return w, err
	}
	for _, l := range plan.Links {
		for _, e := range []End{l.A, l.B} {
			if err := w.configureDev(e); err != nil {
				return w, err
			}
		}
	}
	if err := w.routes(); err != nil {
		return w, err
	}
	if plan.Kind == "mptcp" {
		configure := w.configureMPTCP
		if plan.Tenants != nil {
			configure = w.configureTenantsMPTCP
		}
		if err := configure(); err != nil {
			return w, err
		}
	}
	for _, h := range plan.Hosts {
		_ = netnsutil.Do(h.NetNS, func() error {
			cc, err := netnsutil.ReadSysctl("net.ipv4.tcp_congestion_control")
			w.CC[h.Role] = cc
			return err
		})
	}
	if plan.Tenants != nil {
		// Reports name the measured pair client and server.
		w.CC[Client], w.CC[Server] = w.CC[plan.ClientRole()], w.CC[plan.ServerRole()]
	}
	return w, writeJSON(filepath.Join(dir, "world.json"), w)
}

func applySysctls(h HostPlan) error {
	keys := make([]string, 0, len(h.Sysctls))
	for k := range h.Sysctls {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return netnsutil.Do(h.NetNS, func() error {
		for _, k := range keys {
			write := netnsutil.WriteSysctl
			if k == "net.mptcp.path_manager" {
				// pm_type on kernels before 6.15.
				write = func(_, v string) error { return netnsutil.WritePathManager(v) }
			}
			if err := write(k, h.Sysctls[k]); err != nil {
				if k == "net.ipv4.tcp_congestion_control" {
					avail, _ := netnsutil.ReadSysctl("net.ipv4.tcp_available_congestion_control")
					allowed, _ := netnsutil.ReadSysctl("net.ipv4.tcp_allowed_congestion_control")
					if strings.Contains(" "+avail+" ", " "+h.Sysctls[k]+" ") {
						// Loaded, but a namespace other than the host's may
						// only pick what the host allows.
						return fmt.Errorf("host %s: congestion control %q is loaded but not allowed in network namespaces (allowed: %s); the host's root can allow it: sysctl -w net.ipv4.tcp_allowed_congestion_control=\"%s %s\"", h.Role, h.Sysctls[k], allowed, allowed, h.Sysctls[k])
					}
					return fmt.Errorf("host %s: congestion control %q is not available (available: %s)", h.Role, h.Sysctls[k], avail)
				}
				return fmt.Errorf("host %s: %w", h.Role, err)
			}
		}
		return nil
	})
}

func (w *World) startEmulator(ctx context.Context, o Options) error {
	bin := o.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return err
		}
	}
	logf, err := os.Create(filepath.Join(w.Dir, "emulator.log"))
	if err != nil {
		return err
	}
	defer logf.Close()
	r, wr, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(bin, "lab", "emulate", "--state", w.Dir)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.ExtraFiles = []*os.File{wr}
	// Its own session: the emulator outlives `lab up` and ignores the
	// terminal's Ctrl-C (lab run removes it deliberately).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		wr.Close()
		return fmt.Errorf("start link emulator: %w", err)
	}
	wr.Close()
	w.EmulatorPID = cmd.Process.Pid
	go cmd.Wait() // reap it if it ends while we live

	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(r).ReadString('\n')
		line <- strings.TrimSpace(s)
	}()
	select {
	case s := <-line:
		if s == "ready" {
			return nil
		}
		if s == "" {
			tail, _ := os.ReadFile(filepath.Join(w.Dir, "emulator.log"))
			return fmt.Errorf("link emulator exited before it was ready: %s", strings.TrimSpace(string(tail)))
		}
		return fmt.Errorf("link emulator: %s", strings.TrimPrefix(s, "error: "))
	case <-time.After(timescale.Scaled(30 * time.Second)):
		return fmt.Errorf("link emulator did not become ready within %v", timescale.Scaled(30*time.Second))
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (w *World) nl(host string) (*netlink.Handle, error) {
	return netnsutil.Netlink(NetNS(w.Name, host))
}

func (w *World) configureDev(e End) error {
	h, err := w.nl(e.Host)
	if err != nil {
		return err
	}
	defer h.Close()
	l, err := h.LinkByName(e.Dev)
	if err != nil {
		return fmt.Errorf("host %s: device %s: %w", e.Host, e.Dev, err)
	}
	if err := h.LinkSetMTU(l, 1500); err != nil {
		return fmt.Errorf("host %s: %s mtu: %w", e.Host, e.Dev, err)
	}
	_ = h.LinkSetTxQLen(l, 1000)
	if e.Master != "" {
		br, err := h.LinkByName(e.Master)
		if err == nil {
			err = h.LinkSetMaster(l, br)
		}
		if err != nil {
			return fmt.Errorf("host %s: %s as a port of %s: %w", e.Host, e.Dev, e.Master, err)
		}
	}
	if e.Addr.IsValid() {
		if err := h.AddrAdd(l, &netlink.Addr{IPNet: toIPNet(e.Addr)}); err != nil {
			return fmt.Errorf("host %s: %s address %s: %w", e.Host, e.Dev, e.Addr, err)
		}
	}
	if err := h.LinkSetUp(l); err != nil {
		return fmt.Errorf("host %s: %s up: %w", e.Host, e.Dev, err)
	}
	return nil
}

func (w *World) makeVeth(v VethPlan) error {
	ha, err := w.nl(v.A.Host)
	if err != nil {
		return err
	}
	defer ha.Close()
	peerNS, err := netnsutil.Open(NetNS(w.Name, v.B.Host))
	if err != nil {
		return err
	}
	defer peerNS.Close()
	veth := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: v.A.Dev, MTU: 1500}, PeerName: v.B.Dev, PeerNamespace: netlink.NsFd(peerNS)}
	if err := ha.LinkAdd(veth); err != nil {
		return fmt.Errorf("veth %s/%s-%s/%s: %w", v.A.Host, v.A.Dev, v.B.Host, v.B.Dev, err)
	}
	for _, e := range []End{v.A, v.B} {
		if err := w.configureDev(e); err != nil {
			return err
		}
	}
	return nil
}

func (w *World) routes() error {
	for _, ru := range w.Rules {
		h, err := w.nl(ru.Host)
		if err != nil {
			return err
		}
		rule := netlink.NewRule()
		rule.Family = netlink.FAMILY_V4
		if ru.From.IsValid() {
			rule.Src = toIPNet(netip.PrefixFrom(ru.From, 32))
		}
		if ru.To.IsValid() {
			rule.Dst = toIPNet(ru.To)
		}
		rule.Mark = ru.Mark
		rule.Table = ru.Table
		rule.Priority = ru.Table
		if ru.Priority > 0 {
			rule.Priority = ru.Priority
		}
		err = h.RuleAdd(rule)
		h.Close()
		if err != nil {
			return fmt.Errorf("host %s: %s: %w", ru.Host, ru, err)
		}
	}
	for _, rt := range w.Routes {
		h, err := w.nl(rt.Host)
		if err != nil {
			return err
		}
		err = addRoute(h, rt, false)
		h.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// addRoute installs one route of the plan (replace: whether or not it is
// there already).
func addRoute(h *netlink.Handle, rt Route, replace bool) error {
	route := &netlink.Route{Dst: toIPNet(rt.Dst), Table: rt.Table}
	var idx []int
	for _, d := range rt.Devs {
		l, err := h.LinkByName(d)
		if err != nil {
			return fmt.Errorf("host %s: route via %s: %w", rt.Host, d, err)
		}
		idx = append(idx, l.Attrs().Index)
	}
	if len(idx) == 1 {
		route.LinkIndex = idx[0]
		if rt.Via.IsValid() {
			route.Gw = net.IP(rt.Via.AsSlice())
		} else {
			route.Scope = netlink.SCOPE_LINK
		}
	} else {
		for _, i := range idx {
			route.MultiPath = append(route.MultiPath, &netlink.NexthopInfo{LinkIndex: i})
		}
	}
	add := h.RouteAdd
	if replace {
		add = h.RouteReplace
	}
	if err := add(route); err != nil {
		return fmt.Errorf("host %s: route %s via %v (table %d): %w", rt.Host, rt.Dst, rt.Devs, rt.Table, err)
	}
	return nil
}

func (w *World) configureMPTCP() error {
	for _, role := range []string{Client, Server} {
		c, err := pm.Dial(pm.Options{NetNSName: NetNS(w.Name, role)})
		if err != nil {
			return err
		}
		lim := w.Limits
		if h := w.Host(Client); role == Server && h != nil && h.PathManager == scenario.PMUserspace {
			// A daemon (or mptcpd) opens the client's subflows and decides
			// how many; the server accepts what the kernel allows (prefer
			// probes a failed path with fresh joins while the subflow it
			// replaces is still counted).
			lim.Subflows = MaxEndpoints
		}
		if w.SpareJoin {
			lim.Subflows = min(lim.Subflows+1, MaxEndpoints)
		}
		err = c.SetLimits(lim)
		if err == nil {
			err = w.addEndpoints(c, role)
		}
		c.Close()
		if err != nil {
			return fmt.Errorf("host %s: %w", role, err)
		}
	}
	return nil
}

// addEndpoints gives a host its kernel path-manager endpoints: the
// client's subflow endpoints, the server's signal endpoints (none for a
// host under the userspace path manager: the plan leaves them out).
func (w *World) addEndpoints(c *pm.Client, role string) error {
	h, err := w.nl(role)
	if err != nil {
		return err
	}
	defer h.Close()
	for _, p := range w.Paths {
		flags, end := p.Endpoint, p.Client
		if role == Server {
			flags, end = p.ServerEndpoint, p.Server
		}
		if flags == nil {
			continue
		}
		l, err := h.LinkByName(end.Dev)
		if err != nil {
			return err
		}
		if _, err := c.AddEndpoint(pm.Endpoint{Addr: end.Addr, Flags: *flags, IfIndex: int32(l.Attrs().Index)}); err != nil {
			return fmt.Errorf("endpoint for path %s: %w", p.Name, err)
		}
	}
	return nil
}

func toIPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(data, '\n'), 0o644)
}

// Load reads a running world's state.
func Load(name string) (*World, error) {
	if err := ValidName(name); err != nil {
		return nil, err
	}
	dir := filepath.Join(StateRoot, name)
	data, err := os.ReadFile(filepath.Join(dir, "world.json"))
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("no lab named %q is up (see `mpsteer lab ls`)", name)
	}
	if err != nil {
		return nil, err
	}
	var w World
	if err := json.Unmarshal(data, &w); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, "world.json"), err)
	}
	w.Dir = dir
	return &w, nil
}

// List names the labs that are up.
func List() ([]string, error) {
	ents, err := os.ReadDir(StateRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	var out []string
	for _, e := range ents {
		if e.IsDir() {
			out = append(out, e.Name())
		}
	}
	return out, err
}

// NetNSOf returns the namespace of a host role, with a clear error.
func (w *World) NetNSOf(host string) (string, error) {
	for _, h := range w.Hosts {
		if h.Role == host {
			return h.NetNS, nil
		}
	}
	var roles []string
	for _, h := range w.Hosts {
		roles = append(roles, h.Role)
	}
	return "", fmt.Errorf("lab %s has no host %q (hosts: %s)", w.Name, host, strings.Join(roles, ", "))
}

// Command runs argv inside a host of the world.
func (w *World) Command(host string, argv ...string) (*exec.Cmd, error) {
	ns, err := w.NetNSOf(host)
	if err != nil {
		return nil, err
	}
	return exec.Command("ip", append([]string{"netns", "exec", ns}, argv...)...), nil
}

// Down removes the world: its processes, namespaces and state.
func (w *World) Down() error {
	return down(w.Name, w.Dir, w.EmulatorPID)
}

// DownByName removes a lab by name, also when its state is damaged.
func DownByName(name string) error {
	if err := ValidName(name); err != nil {
		return err
	}
	dir := filepath.Join(StateRoot, name)
	pid := 0
	if w, err := Load(name); err == nil {
		pid = w.EmulatorPID
	} else if b, err := os.ReadFile(filepath.Join(dir, "emulator.pid")); err == nil {
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	_, statErr := os.Stat(dir)
	nss, _ := netnsutil.List(NSPrefix + name + "-")
	if statErr != nil && len(nss) == 0 {
		return fmt.Errorf("no lab named %q is up (see `mpsteer lab ls`)", name)
	}
	return down(name, dir, pid)
}

// DownAll removes every lab, including namespaces left by a crash.
func DownAll() error {
	var errs error
	names, _ := List()
	for _, n := range names {
		if err := DownByName(n); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	left, _ := netnsutil.List(NSPrefix)
	for _, ns := range left {
		errs = errors.Join(errs, removeNS(ns))
	}
	return errs
}

// HostEhash is the size of the TCP established-socket hash each lab host
// gets of its own: a host's sockets are then found (by the daemon's
// samples, the kernel's lookups) in a table sized for the lab, not in the
// machine's (262 144 buckets on a machine with 24 GiB, walked whole by
// every socket dump).
const HostEhash = 4096

// hashParent makes the namespace the lab's hosts are created from: its
// net.ipv4.tcp_child_ehash_entries gives each of them a TCP hash of its
// own (HostEhash buckets). It holds nothing else and goes with the lab.
func hashParent(lab string) (string, error) {
	parent := NSPrefix + lab + "-nsparent"
	if netnsutil.Exists(parent) {
		return "", fmt.Errorf("network namespace %s already exists (left over from a crash? `mpsteer lab down --all` removes it)", parent)
	}
	if err := netnsutil.Create(parent); err != nil {
		return "", err
	}
	if err := netnsutil.Sysctl(parent, "net.ipv4.tcp_child_ehash_entries", fmt.Sprint(HostEhash)); err != nil {
		return parent, fmt.Errorf("give the lab's hosts TCP hashes of their own: %w", err)
	}
	return parent, nil
}

func down(name, dir string, emuPID int) error {
	var errs error
	if emuPID > 0 && isOurEmulator(emuPID, dir) {
		errs = stopProcess(emuPID)
	}
	nss, _ := netnsutil.List(NSPrefix + name + "-")
	for _, ns := range nss {
		// Only this lab's namespaces: "mps-a-client" must not match lab "a-b".
		host := strings.TrimPrefix(ns, NSPrefix+name+"-")
		if strings.Contains(host, "-") {
			continue
		}
		errs = errors.Join(errs, removeNS(ns))
	}
	if dir != "" {
		errs = errors.Join(errs, os.RemoveAll(dir))
	}
	return errs
}

// removeNS stops the processes the lab started inside a namespace, then
// deletes it. Only lab namespaces (named mps-…) are passed here.
func removeNS(ns string) error {
	var errs error
	pids, _ := netnsutil.PIDs(ns)
	for _, p := range pids {
		if p != os.Getpid() {
			errs = errors.Join(errs, stopProcess(p))
		}
	}
	return errors.Join(errs, netnsutil.Delete(ns))
}

// isOurEmulator checks that pid is still the emulator of this state
// directory, so that a recycled pid is never killed.
func isOurEmulator(pid int, dir string) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil {
		return false
	}
	args := strings.Split(string(b), "\x00")
	return len(args) >= 4 && args[1] == "lab" && args[2] == "emulate" && strings.Contains(string(b), dir)
}

// stopProcess ends a process the lab started: SIGTERM, then SIGKILL if it
// has not exited within a second. Its exit is waited for on a pidfd (it
// is not this process's child, and a pidfd never names a recycled pid).
func stopProcess(pid int) error {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return nil // gone already
	}
	defer unix.Close(fd)
	for _, sig := range []unix.Signal{unix.SIGTERM, unix.SIGKILL} {
		if err := unix.PidfdSendSignal(fd, sig, nil, 0); err != nil {
			return nil // it has exited
		}
		if exited(fd, time.Second) {
			return nil
		}
	}
	return fmt.Errorf("process %d did not exit within 1 s of SIGTERM, nor of SIGKILL", pid)
}

// exited waits until the process of a pidfd has exited (the pidfd turns
// readable), at most d.
func exited(fd int, d time.Duration) bool {
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left < 0 {
			left = 0
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int(left.Milliseconds()))
		switch {
		case err == unix.EINTR:
			continue
		case err != nil:
			return false
		}
		return n > 0
	}
}

// kernelFeatures refuses a plan that needs what the running kernel lacks,
// naming the feature, the version that introduced it and the variant key,
// before anything is built.
func kernelFeatures(plan *Plan) error {
	for _, h := range plan.Hosts {
		if h.PathManager != scenario.PMUserspace {
			continue
		}
		key := "variant key path_manager: userspace"
		if plan.Mptcpd != "" && h.Role == Client {
			key = "variant key mptcpd"
		}
		if err := kernelfeat.Require(kernelfeat.Probe(), kernelfeat.UserspacePM, key); err != nil {
			return err
		}
	}
	return nil
}
