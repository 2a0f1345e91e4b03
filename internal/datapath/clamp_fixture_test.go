package datapath

import (
	"encoding/binary"
	"fmt"
	"net"
	"os"
	"testing"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	"mpsteer/internal/netnsutil"
)

// clamp_rwnd rewriting a real subflow's packet: a TCP connection over the
// loopback of a namespace of the test's own, and an ACK from the server
// to the client's socket run through the chain there (so its socket
// lookup finds the client). The window comes out lowered by the socket's
// window shift and the TCP checksum still right; twice, so that the
// second packet is served by the socket read the chain kept.
func TestClampRwndRewritesWindowAndChecksum(t *testing.T) {
	h := newHarness(t)
	ns := testNetns(t, "mpst-clamp")
	_, clamp := h.chain("", "clamp_rwnd(4KiB)")
	err := netnsutil.Do(ns, func() error {
		ln, err := net.Listen("tcp4", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := net.Dial("tcp4", ln.Addr().String())
		if err != nil {
			return err
		}
		defer c.Close()
		s, err := ln.Accept()
		if err != nil {
			return err
		}
		defer s.Close()
		raw, err := c.(*net.TCPConn).SyscallConn()
		if err != nil {
			return err
		}
		// struct tcp_info's byte 6: tcpi_snd_wscale (low 4 bits), the
		// peer's shift, which its ACKs carry (x/sys/unix leaves it out).
		info := make([]byte, 104)
		var ierr error
		raw.Control(func(fd uintptr) {
			l := uint32(len(info))
			if _, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, fd, unix.IPPROTO_TCP, unix.TCP_INFO,
				uintptr(unsafe.Pointer(&info[0])), uintptr(unsafe.Pointer(&l)), 0); e != 0 {
				ierr = e
			}
		})
		if ierr != nil {
			return ierr
		}
		shift := uint(info[6] & 0xf)
		cli, srv := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
		p := pkt{src: srv.IP.String(), dst: cli.IP.String(), sport: uint16(srv.Port), dport: uint16(cli.Port),
			seq: 1000, ack: 2000, ackf: true, window: 0xffff, opts: []layers.TCPOption{nop, nop, tsOpt}}
		in := build(t, p)
		want := uint16((4096 + (1 << shift) - 1) >> shift)
		for i := 0; i < 2; i++ {
			got := clamp(in)
			if got.modified != 1 {
				return fmt.Errorf("run %d: modified %d, skipped %d: the window was not rewritten", i, got.modified, got.skipped)
			}
			if err := validate(got.out); err != nil {
				return fmt.Errorf("run %d: %v", i, err)
			}
			l4 := 14 + 20
			if w := binary.BigEndian.Uint16(got.out[l4+14:]); w != want {
				return fmt.Errorf("run %d: window %d, want %d (4 KiB at a shift of %d)", i, w, want, shift)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// testNetns creates a network namespace of the test's own (loopback up),
// removed when the test ends.
func testNetns(t *testing.T, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(ns) })
	return ns
}
