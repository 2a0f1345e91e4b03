package clamp_rwnd_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"testing"
	"unsafe"

	"github.com/gopacket/gopacket/layers"
	"golang.org/x/sys/unix"

	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// Without a local socket (no RTT, no window scale) clamp_rwnd leaves the
// packet alone, counted skipped; SYNs (unscaled windows) are never
// touched.
func TestClampRwndNeedsASocketAndSkipsSYNs(t *testing.T) {
	h := dt.NewHarness(t)
	_, clamp := h.Chain("", "clamp_rwnd(64KiB)")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	if got := clamp(in); !bytes.Equal(got.Out, in) || got.Skipped != 1 {
		t.Errorf("clamp without a socket: skipped %d, changed=%v", got.Skipped, !bytes.Equal(got.Out, in))
	}
	syn := dt.ACKPkt(false, dt.V4A, dt.V4B, dt.MPCapable)
	syn.SYN = true
	s := dt.Build(t, syn)
	if got := clamp(s); !bytes.Equal(got.Out, s) || got.Skipped != 0 {
		t.Errorf("clamp touched a SYN")
	}
}

// clamp_rwnd rewriting a real subflow's packet: a TCP connection over the
// loopback of a namespace of the test's own, and an ACK from the server
// to the client's socket run through the chain there (so its socket
// lookup finds the client). The window comes out lowered by the socket's
// window shift and the TCP checksum still right; twice, so that the
// second packet is served by the socket read the chain kept. With the
// kfuncs of 6.2 and without (the checksum then by the kernel's helper).
func TestClampRwndRewritesWindowAndChecksum(t *testing.T) {
	dt.Kfuncs(t, testClampRwndRewrites)
}

func testClampRwndRewrites(t *testing.T, h *dt.Harness) {
	ns := testutil.Netns(t, "mpst-clamp")
	_, clamp := h.Chain("", "clamp_rwnd(4KiB)")
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
		p := dt.Pkt{Src: srv.IP.String(), Dst: cli.IP.String(), Sport: uint16(srv.Port), Dport: uint16(cli.Port),
			Seq: 1000, Ack: 2000, ACK: true, Window: 0xffff, Opts: []layers.TCPOption{dt.Nop, dt.Nop, dt.TSOpt}}
		in := dt.Build(t, p)
		want := uint16((4096 + (1 << shift) - 1) >> shift)
		for i := 0; i < 2; i++ {
			got := clamp(in)
			if got.Modified != 1 {
				return fmt.Errorf("run %d: modified %d, skipped %d: the window was not rewritten", i, got.Modified, got.Skipped)
			}
			if err := dt.Validate(got.Out); err != nil {
				return fmt.Errorf("run %d: %v", i, err)
			}
			l4 := 14 + 20
			if w := binary.BigEndian.Uint16(got.Out[l4+14:]); w != want {
				return fmt.Errorf("run %d: window %d, want %d (4 KiB at a shift of %d)", i, w, want, shift)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
