package sockops

import (
	"fmt"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// The avoid_initial program binds an unbound MPTCP socket's first subflow
// to the chosen address at connect(), and leaves plain TCP, bound sockets
// and a cleared choice alone.
func TestInitialBinderBindsMPTCPConnects(t *testing.T) {
	ns := vethNS(t, "mpsteer-initial-", "10.9.0.1/24", "10.9.1.1/24")
	var cookie uint64
	if err := netnsutil.Do(ns, func() error {
		var err error
		cookie, err = bpfutil.NetNSCookie()
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ln := testutil.ServeIn(t, ns, "10.9.0.1:0", false, nil)
	port := ln.Addr().(*net.TCPAddr).Port

	b, err := NewInitialBinder(cookie)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if err := b.Set(netip.MustParseAddr("10.9.1.1")); err != nil {
		t.Fatal(err)
	}
	// connect opens a socket of the protocol in the namespace, optionally
	// bound, connects to the listener and returns its local address.
	connect := func(proto int, bind string) netip.Addr {
		t.Helper()
		var local netip.Addr
		err := netnsutil.Do(ns, func() error {
			fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, proto)
			if err != nil {
				return fmt.Errorf("socket (protocol %d): %w", proto, err)
			}
			defer unix.Close(fd)
			if bind != "" {
				if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: netip.MustParseAddr(bind).As4()}); err != nil {
					return err
				}
			}
			if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{10, 9, 0, 1}}); err != nil {
				return err
			}
			sa, err := unix.Getsockname(fd)
			if err != nil {
				return err
			}
			local = netip.AddrFrom4(sa.(*unix.SockaddrInet4).Addr)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return local
	}
	const mptcp = 262 // IPPROTO_MPTCP
	if got := connect(mptcp, ""); got.String() != "10.9.1.1" {
		t.Fatalf("MPTCP connect from %s, want the chosen 10.9.1.1", got)
	}
	if got := connect(unix.IPPROTO_TCP, ""); got.String() != "10.9.0.1" {
		t.Fatalf("plain TCP connect from %s, want routing's 10.9.0.1", got)
	}
	if got := connect(mptcp, "10.9.0.1"); got.String() != "10.9.0.1" {
		t.Fatalf("bound MPTCP socket connected from %s, want its own 10.9.0.1", got)
	}
	if err := b.Set(netip.Addr{}); err != nil {
		t.Fatal(err)
	}
	if got := connect(mptcp, ""); got.String() != "10.9.0.1" {
		t.Fatalf("with no address chosen, MPTCP connect from %s, want routing's 10.9.0.1", got)
	}
	if st := b.Stats(); st["bound"] != 1 || st["failed"] != 0 || st["mptcp_connects"] < 3 {
		t.Fatalf("counters %v: want one bind, none failed", st)
	}
	if err := b.Set(netip.MustParseAddr("fd00::1")); err == nil {
		t.Fatal("an IPv6 address was accepted")
	}
}
