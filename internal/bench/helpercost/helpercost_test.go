package helpercost

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"os"
	"testing"

	"github.com/cilium/ebpf"

	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// packet is an incoming IPv4 TCP segment (Ethernet, 20-byte IP header,
// 40-byte TCP header), the shape the programs expect.
func packet() []byte {
	b := make([]byte, 14+20+40)
	binary.BigEndian.PutUint16(b[12:], 0x0800)
	ip := b[14:]
	ip[0], ip[8], ip[9] = 0x45, 64, 6
	binary.BigEndian.PutUint16(ip[2:], 60)
	ip[20+12] = 10 << 4 // TCP data offset: 40 bytes
	return b
}

// Every program runs on the bench's packet as its name says: the lookup
// finds the connection's socket (the loader's byte order), the packet
// grows only in change_tail.
func TestHelpersRunAsNamed(t *testing.T) {
	testutil.RequireRoot(t, "loading BPF programs in a namespace")
	ns := fmt.Sprintf("mpt-hc%d", os.Getpid()%100000)
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(ns) })
	if err := netnsutil.Sysctl(ns, "net.mptcp.enabled", "1"); err != nil {
		t.Fatal(err)
	}
	err := netnsutil.Do(ns, func() error {
		c, _, closeAll, err := traffic.LocalPair("tcp", "127.0.0.1:0", true)
		if err != nil {
			return err
		}
		defer closeAll()
		local, peer := c.LocalAddr().(*net.TCPAddr).AddrPort(), c.RemoteAddr().(*net.TCPAddr).AddrPort()
		s, err := Load(peer, local)
		if err != nil {
			return err
		}
		defer s.Close()
		pkt := packet()
		for _, h := range s.Helpers {
			ret, _, err := h.Prog.Benchmark(pkt, 1, nil)
			if err != nil {
				return fmt.Errorf("%s: %w", h.Key, err)
			}
			if int32(ret) != -1 {
				t.Errorf("%s: returned %d, want -1 (its helper failed)", h.Key, int32(ret))
			}
			if h.Single {
				opts := &ebpf.RunOptions{Data: pkt, DataOut: make([]byte, len(pkt)+64)}
				if _, err := h.Prog.Run(opts); err != nil {
					return fmt.Errorf("%s: %w", h.Key, err)
				}
				if len(opts.DataOut) != len(pkt)+4 {
					t.Errorf("%s: packet of %d bytes after, want %d", h.Key, len(opts.DataOut), len(pkt)+4)
				}
			}
		}
		if n, err := s.Found(); err != nil || n != 1 {
			t.Errorf("the lookup found the connection's socket %d times (%v), want 1", n, err)
		}
		// Another flow's tuple finds nothing: the count is the lookup's.
		other, err := Load(netip.AddrPortFrom(peer.Addr(), peer.Port()+1), local)
		if err != nil {
			return err
		}
		defer other.Close()
		if _, _, err := other.Helpers[0].Prog.Benchmark(pkt, 1, nil); err != nil {
			return err
		}
		if n, _ := other.Found(); n != 0 {
			t.Errorf("a lookup of a tuple no socket has found one (%d)", n)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
