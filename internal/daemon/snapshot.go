package daemon

import (
	"net"
	"net/netip"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

const tcpEstablished = 1

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
	return policy.Env{Addrs: ifaces.addrs, Interfaces: ifaces.all, PathManager: pathManager()}
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

// established keeps the subflows that carry data.
func established(sfs []observe.Subflow) []observe.Subflow {
	n := 0
	for i := range sfs {
		if sfs[i].State == tcpEstablished {
			n++
		}
	}
	out := make([]observe.Subflow, 0, n)
	for _, sf := range sfs {
		if sf.State == tcpEstablished {
			out = append(out, sf)
		}
	}
	return out
}

// tcpSynSent and tcpSynRecv are the states of a subflow still joining.
const (
	tcpSynSent = 2
	tcpSynRecv = 3
)

// snapshot groups subflows by connection and adds what the kernel's
// connection counters and the path manager's events say about each; it
// hands the policies the outcomes of the actions taken since the last one.
//
// buf, when not nil, is an array to reuse for the subflows (the round's
// own: tick's, whose last snapshot is no one's when the next is built).
func (d *Daemon) snapshot(now time.Time, sfs []observe.Subflow, conns map[uint32]observe.Conn, buf *[]observe.Subflow) *policy.Snapshot {
	by := map[uint32]*policy.Conn{}
	var order []uint32
	get := func(tok uint32) *policy.Conn {
		c := by[tok]
		if c == nil {
			c = &policy.Conn{Token: tok}
			if dc, ok := conns[tok]; ok {
				if !dc.Remote.Addr().IsUnspecified() { // 0.0.0.0:0 while connecting: unknown
					c.Local, c.Remote = dc.Local, dc.Remote
				}
				c.BytesAcked, c.BytesSent, c.BytesRecv = dc.BytesAcked, dc.BytesSent, dc.BytesRecv
			}
			if ev, ok := d.tracker.Conn(tok); ok {
				if !c.Local.IsValid() {
					c.Local, c.Remote = ev.Local, ev.Remote
				}
				c.RemoteAddrs, c.Closed = ev.RemoteAddrs, ev.Closed
				c.ServerSide, c.Established = ev.ServerSide, ev.Established
				if !ev.SideKnown {
					c.ServerSide = guessServerSide(c.Local, c.Remote)
				}
			} else {
				c.ServerSide = guessServerSide(c.Local, c.Remote)
			}
			c.Health = d.healthOf(tok) // the peer's path-health reports (health.go)
			// Data acknowledged or received at the connection level:
			// fully established, whether or not its event was seen.
			c.Established = c.Established || c.BytesAcked > 0 || c.BytesRecv > 0
			by[tok] = c
			order = append(order, tok)
		}
		return c
	}
	// The connections' subflows share one array, each its own part of it
	// (a part's capacity ends where the next begins): no growing per
	// connection.
	counts := map[uint32]int{}
	total := 0
	for i := range sfs {
		if sfs[i].State == tcpEstablished {
			counts[sfs[i].Token]++
			total++
		}
	}
	var all []observe.Subflow
	if buf != nil && cap(*buf) >= total {
		all = (*buf)[:0]
	} else {
		all = make([]observe.Subflow, 0, total)
	}
	if buf != nil {
		defer func() { *buf = all }()
	}
	for _, sf := range sfs {
		switch sf.State {
		case tcpEstablished:
			c := get(sf.Token)
			if c.Subflows == nil {
				n := counts[sf.Token]
				c.Subflows, all = all[len(all):len(all):len(all)+n], all[:len(all)+n]
			}
			c.Subflows = append(c.Subflows, sf)
		case tcpSynSent, tcpSynRecv:
			c := get(sf.Token)
			c.Pending = append(c.Pending, sf)
		}
	}
	// Connections the events know of but no sample shows yet (just
	// established).
	for _, tok := range d.tracker.Tokens() {
		if _, ok := conns[tok]; ok || by[tok] != nil {
			continue
		}
		if ev, ok := d.tracker.Conn(tok); ok && ev.Local.IsValid() {
			get(tok)
		}
	}
	sort.Slice(order, func(i, j int) bool { return order[i] < order[j] })
	scopes := scopedCgroups(d.engine)
	for _, c := range by {
		d.cgroupOf(c, conns, scopes, now) // appscope.go
	}
	s := &policy.Snapshot{Now: now, Outcomes: d.outcomes}
	d.outcomes = nil
	for _, t := range order {
		if c := by[t]; len(c.Subflows) > 0 || len(c.Pending) > 0 || c.Local.IsValid() {
			s.Conns = append(s.Conns, c)
		}
	}
	return s
}

// guessServerSide: without the connection's own event (the daemon started
// after it), the side that listens is taken to be the one with the lower
// port (services listen on low ports, clients get ephemeral ones).
func guessServerSide(local, remote netip.AddrPort) bool {
	return local.IsValid() && remote.IsValid() && local.Port() < remote.Port()
}
