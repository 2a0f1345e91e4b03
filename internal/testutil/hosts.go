package testutil

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"sync/atomic"
	"testing"

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

var hostSeq atomic.Int32

// TwoHosts builds the namespaces and removes them when the test ends.
func TwoHosts(t testing.TB, n int) Hosts {
	t.Helper()
	id := fmt.Sprintf("mpt%d-%d", os.Getpid()%100000, hostSeq.Add(1))
	h := Hosts{Client: id + "-c", Server: id + "-s", N: n}
	for _, ns := range []string{h.Client, h.Server} {
		if err := netnsutil.Create(ns); err != nil {
			t.Fatal(err)
		}
		ns := ns
		t.Cleanup(func() {
			pids, _ := netnsutil.PIDs(ns)
			for _, p := range pids {
				if p != os.Getpid() {
					if proc, err := os.FindProcess(p); err == nil {
						proc.Kill()
					}
				}
			}
			netnsutil.Delete(ns)
		})
		for _, kv := range [][2]string{{"net.mptcp.enabled", "1"}, {"net.ipv4.conf.all.rp_filter", "0"}, {"net.ipv4.conf.default.rp_filter", "0"}} {
			if err := netnsutil.Sysctl(ns, kv[0], kv[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	ch, err := netnsutil.Netlink(h.Client)
	if err != nil {
		t.Fatal(err)
	}
	defer ch.Close()
	sh, err := netnsutil.Netlink(h.Server)
	if err != nil {
		t.Fatal(err)
	}
	defer sh.Close()
	srvNS, err := netnsutil.Open(h.Server)
	if err != nil {
		t.Fatal(err)
	}
	defer srvNS.Close()
	for i := 1; i <= n; i++ {
		dev := h.Dev(i)
		if err := ch.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: dev}, PeerName: dev, PeerNamespace: netlink.NsFd(srvNS)}); err != nil {
			t.Fatal(err)
		}
		for _, side := range []struct {
			nh   *netlink.Handle
			addr netip.Addr
		}{{ch, h.ClientAddr(i)}, {sh, h.ServerAddr(i)}} {
			l, err := side.nh.LinkByName(dev)
			if err != nil {
				t.Fatal(err)
			}
			ipn := &net.IPNet{IP: net.IP(side.addr.AsSlice()), Mask: net.CIDRMask(24, 32)}
			if err := side.nh.AddrAdd(l, &netlink.Addr{IPNet: ipn}); err != nil {
				t.Fatal(err)
			}
			if err := side.nh.LinkSetUp(l); err != nil {
				t.Fatal(err)
			}
		}
		l, _ := ch.LinkByName(dev)
		rule := netlink.NewRule()
		rule.Src = &net.IPNet{IP: net.IP(h.ClientAddr(i).AsSlice()), Mask: net.CIDRMask(32, 32)}
		rule.Table = 100 + i
		rule.Priority = 100 + i
		if err := ch.RuleAdd(rule); err != nil {
			t.Fatal(err)
		}
		_, all, _ := net.ParseCIDR("0.0.0.0/0")
		if err := ch.RouteAdd(&netlink.Route{Dst: all, LinkIndex: l.Attrs().Index, Table: 100 + i, Scope: netlink.SCOPE_LINK}); err != nil {
			t.Fatal(err)
		}
	}
	return h
}
