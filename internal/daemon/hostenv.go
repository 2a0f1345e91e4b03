package daemon

import (
	"errors"
	"io/fs"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// InterfaceAddrs resolves an interface of the daemon's namespace.
func InterfaceAddrs(name string) ([]netip.Addr, bool) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, false
	}
	return ifaceAddrs(ifi), true
}

func ifaceAddrs(ifi *net.Interface) []netip.Addr {
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ad, ok := netip.AddrFromSlice(ipn.IP); ok && !ad.Unmap().IsLinkLocalUnicast() {
				out = append(out, ad.Unmap())
			}
		}
	}
	return out
}

// Interfaces lists the namespace's interfaces that are up, loopback
// excluded, with their addresses.
func Interfaces() map[string][]netip.Addr {
	ifs, err := net.Interfaces()
	if err != nil {
		return nil
	}
	out := map[string][]netip.Addr{}
	for i := range ifs {
		if ifs[i].Flags&net.FlagLoopback != 0 || ifs[i].Flags&net.FlagUp == 0 {
			continue
		}
		if a := ifaceAddrs(&ifs[i]); len(a) > 0 {
			out[ifs[i].Name] = a
		}
	}
	return out
}

// hostEnv is the policy environment of this host.
func hostEnv() policy.Env {
	env := policy.Env{Addrs: ifaces.addrs, Interfaces: ifaces.all, PathManager: observe.PathManager(),
		SelectUserspace: netnsutil.UserspacePMSetting()}
	env.SynLinearTimeouts, env.SynLinearKnown = synLinearTimeouts()
	env.Tick = sockops.Tick() // the tick the probes' SYN timeouts are counted in
	return env
}

// synLinearTimeouts reads the namespace's net.ipv4.tcp_syn_linear_timeouts:
// 0 when the kernel has none (before 6.5 every SYN timeout doubles); ok
// false when it cannot be read.
func synLinearTimeouts() (n int, ok bool) {
	v, err := netnsutil.ReadSysctl("net.ipv4.tcp_syn_linear_timeouts")
	if errors.Is(err, fs.ErrNotExist) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	n, err = strconv.Atoi(strings.TrimSpace(v))
	return n, err == nil && n >= 0
}

// ifaces caches what the policies ask of the namespace's interfaces:
// they ask on every decision, those between samples (events) included,
// and a netlink dump of the interfaces and their addresses costs more
// than a decision (measured: it tripled the reaction to an event). A
// view lives at most ifaceTTL and is dropped at every sample (tick) and
// interface or address event.
var ifaces = &ifaceCache{}

const ifaceTTL = 100 * time.Millisecond

type ifaceCache struct {
	mu     sync.Mutex
	at     time.Time
	list   map[string][]netip.Addr
	listOK bool
	byName map[string]ifaceAddrsResult
}

type ifaceAddrsResult struct {
	addrs []netip.Addr
	ok    bool
}

// fresh drops an expired view; the caller holds mu.
func (c *ifaceCache) fresh() {
	if time.Since(c.at) > ifaceTTL {
		c.list, c.listOK, c.byName, c.at = nil, false, map[string]ifaceAddrsResult{}, time.Now()
	}
}

// invalidate drops the view: the next question reads the kernel.
func (c *ifaceCache) invalidate() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

func (c *ifaceCache) all() map[string][]netip.Addr {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fresh()
	if !c.listOK {
		c.list, c.listOK = Interfaces(), true
	}
	return c.list
}

func (c *ifaceCache) addrs(name string) ([]netip.Addr, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.fresh()
	r, ok := c.byName[name]
	if !ok {
		r.addrs, r.ok = InterfaceAddrs(name)
		c.byName[name] = r
	}
	return r.addrs, r.ok
}

// Env is the policy environment of this host (interfaces, path manager).
func Env() policy.Env { return hostEnv() }
