package daemon

import (
	"net"
	"net/netip"
	"sort"
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
	return policy.Env{Addrs: InterfaceAddrs, Interfaces: Interfaces, PathManager: pathManager()}
}

// Env is the policy environment of this host (interfaces, path manager).
func Env() policy.Env { return hostEnv() }

// established keeps the subflows that carry data.
func established(sfs []observe.Subflow) []observe.Subflow {
	var out []observe.Subflow
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
func (d *Daemon) snapshot(now time.Time, sfs []observe.Subflow, conns map[uint32]observe.Conn) *policy.Snapshot {
	by := map[uint32]*policy.Conn{}
	var order []uint32
	get := func(tok uint32) *policy.Conn {
		c := by[tok]
		if c == nil {
			c = &policy.Conn{Token: tok}
			if dc, ok := conns[tok]; ok {
				c.Local, c.Remote = dc.Local, dc.Remote
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
	for _, sf := range sfs {
		switch sf.State {
		case tcpEstablished:
			c := get(sf.Token)
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
