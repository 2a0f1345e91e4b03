// Package vethhosts makes two network namespaces joined by plain veth
// pairs (no emulation): the quickest world for tests and benchmarks of the
// control plane, where link delay does not matter.
package vethhosts

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"

	"github.com/vishvananda/netlink"

	"mpsteer/internal/netnsutil"
)

// Hosts are two namespaces joined by n veth pairs: link i (1-based) has
// client address 10.i.0.1/24 and server address 10.i.0.2/24, and the
// client routes by source address so a subflow follows its local address.
type Hosts struct {
	Client, Server string
	N              int
}

// ClientAddr is the client's address on link i.
func (h Hosts) ClientAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i), 0, 1}) }

// ServerAddr is the server's address on link i.
func (h Hosts) ServerAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i), 0, 2}) }

// Dev is the device name of link i (same in both namespaces).
func (h Hosts) Dev(i int) string { return fmt.Sprintf("veth%d", i) }

var seq atomic.Int32

// New builds the namespaces (named mpv<pid>-<n>-c/-s). Close removes them.
func New(n int) (h Hosts, err error) {
	id := fmt.Sprintf("mpv%d-%d", os.Getpid()%100000, seq.Add(1))
	h = Hosts{Client: id + "-c", Server: id + "-s", N: n}
	defer func() {
		if err != nil {
			h.Close()
		}
	}()
	for _, ns := range []string{h.Client, h.Server} {
		if err := netnsutil.Create(ns); err != nil {
			return h, err
		}
		for _, kv := range [][2]string{{"net.mptcp.enabled", "1"}, {"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}} {
			if err := netnsutil.Sysctl(ns, kv[0], kv[1]); err != nil {
				return h, err
			}
		}
	}
	ch, err := netnsutil.Netlink(h.Client)
	if err != nil {
		return h, err
	}
	defer ch.Close()
	sh, err := netnsutil.Netlink(h.Server)
	if err != nil {
		return h, err
	}
	defer sh.Close()
	srvNS, err := netnsutil.Open(h.Server)
	if err != nil {
		return h, err
	}
	defer srvNS.Close()
	for i := 1; i <= n; i++ {
		dev := h.Dev(i)
		if err := ch.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev}, PeerName: dev, PeerNamespace: netlink.NsFd(srvNS)}); err != nil {
			return h, err
		}
		for _, side := range []struct {
			nh   *netlink.Handle
			addr netip.Addr
		}{{ch, h.ClientAddr(i)}, {sh, h.ServerAddr(i)}} {
			l, err := side.nh.LinkByName(dev)
			if err != nil {
				return h, err
			}
			ipn := &net.IPNet{IP: net.IP(side.addr.AsSlice()), Mask: net.CIDRMask(24, 32)}
			if err := side.nh.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				return h, err
			}
			if err := side.nh.LinkSetUp(l); err != nil {
				return h, err
			}
		}
		l, err := ch.LinkByName(dev)
		if err != nil {
			return h, err
		}
		rule := netlink.NewRule()
		rule.Src = &net.IPNet{IP: net.IP(h.ClientAddr(i).AsSlice()), Mask: net.CIDRMask(32, 32)}
		rule.Table = 100 + i
		rule.Priority = 100 + i
		if err := ch.RuleAdd(rule); err != nil {
			return h, err
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		if err := ch.RouteAdd(&netlink.Route{Dst: all, LinkIndex: l.Attrs().Index, Table: 100 + i, Scope: netlink.SCOPE_LINK}); err != nil {
			return h, err
		}
	}
	return h, nil
}

// Shape limits what the client sends on link i to bitsPerSecond with a
// TBF qdisc (kernel shaping, no emulator process). MPTCP over unshaped
// veth swings several-fold from one transfer to the next on this kernel;
// behind a shaper it is steady.
func (h Hosts) Shape(i int, bitsPerSecond uint64) error {
	nh, err := netnsutil.Netlink(h.Client)
	if err != nil {
		return err
	}
	defer nh.Close()
	link, err := nh.LinkByName(h.Dev(i))
	if err != nil {
		return err
	}
	rate := bitsPerSecond / 8 // bytes per second
	burst := uint32(512 << 10)
	q := &netlink.Tbf{
		QdiscAttrs: netlink.QdiscAttrs{LinkIndex: link.Attrs().Index, Handle: netlink.MakeHandle(1, 0), Parent: netlink.HANDLE_ROOT},
		Rate:       rate,
		Limit:      burst + uint32(rate/500), // the burst and 2 ms of queue
		Buffer:     netlink.Xmittime(rate, burst),
	}
	if err := nh.QdiscAdd(q); err != nil {
		return fmt.Errorf("shape %s in %s: %w", h.Dev(i), h.Client, err)
	}
	return nil
}

// Close stops the processes left in the namespaces and removes them.
func (h Hosts) Close() error {
	var errs error
	for _, ns := range []string{h.Client, h.Server} {
		if !netnsutil.Exists(ns) {
			continue
		}
		pids, _ := netnsutil.PIDs(ns)
		for _, p := range pids {
			if p != os.Getpid() {
				if proc, err := os.FindProcess(p); err == nil {
					proc.Kill()
				}
			}
		}
		errs = errors.Join(errs, netnsutil.Delete(ns))
	}
	return errs
}
