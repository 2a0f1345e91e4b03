package observe_test

import (
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/testutil"
)

// open connects over loopback in the current namespace and keeps both
// ends open until the test ends.
func open(t *testing.T, network, addr string, mptcp bool) netip.AddrPort {
	t.Helper()
	c, _, closeAll, err := traffic.LocalPair(network, addr, mptcp)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(closeAll)
	return c.LocalAddr().(*net.TCPAddr).AddrPort()
}

// Both ways of dumping (one walk for both families, one per family) see
// the same sockets: an MPTCP subflow over IPv4 and plain TCP over IPv6.
func TestSamplerSeesSubflowsAndTCP(t *testing.T) {
	var mp, plain netip.AddrPort
	fd := mptcpNetns(t, "mpobs", func() {
		mp = open(t, "tcp4", "127.0.0.1:0", true)
		plain = open(t, "tcp6", "[::1]:0", false)
	})
	cg := ownCgroupID(t)
	var got [2][]string
	for i, oneWalk := range []bool{true, false} {
		s, err := observe.NewSampler(fd)
		if err != nil {
			t.Fatal(err)
		}
		observe.PerFamily(s, !oneWalk)
		all, err := s.TCP()
		s.Close()
		if err != nil {
			t.Fatal(err)
		}
		var sawMP, sawPlain bool
		for _, sf := range all {
			got[i] = append(got[i], fmt.Sprintf("%s→%s mptcp=%v", sf.Local, sf.Remote, sf.MPTCP))
			switch sf.Local {
			case mp:
				sawMP = sf.MPTCP && sf.Token != 0 && sf.SRTT > 0 && sf.CgroupID == cg
			case plain:
				sawPlain = !sf.MPTCP && sf.MSS > 0
			}
		}
		if !sawMP || !sawPlain {
			t.Errorf("one walk=%v: MPTCP subflow %s seen with its token and cgroup %d: %v; TCP over IPv6 %s seen: %v; got %v", oneWalk, mp, cg, sawMP, plain, sawPlain, got[i])
		}
		sort.Strings(got[i])
	}
	if fmt.Sprint(got[0]) != fmt.Sprint(got[1]) {
		t.Errorf("the two dumps differ:\n one walk:   %v\n per family: %v", got[0], got[1])
	}
}

// mptcpNetns makes a network namespace with MPTCP on (skipping without
// the lab's privileges), runs open inside it, and returns an open file
// descriptor of it; both go when the test ends.
func mptcpNetns(t *testing.T, prefix string, open func()) int {
	t.Helper()
	testutil.RequireLab(t)
	ns := fmt.Sprintf("%s%d", prefix, os.Getpid()%100000)
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(ns) })
	netnsutil.Sysctl(ns, "net.mptcp.enabled", "1")
	netnsutil.Do(ns, func() error { open(); return nil })
	h, err := netnsutil.Open(ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return int(h)
}

// ownCgroupID is the cgroup v2 id of the test process's cgroup.
func ownCgroupID(t *testing.T) uint64 {
	t.Helper()
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	root, err := bpfutil.Cgroup2Root()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "0::"); ok {
			var st syscall.Stat_t
			if err := syscall.Stat(filepath.Join(root, rest), &st); err != nil {
				t.Fatal(err)
			}
			return st.Ino
		}
	}
	t.Fatal("no cgroup v2 line in /proc/self/cgroup")
	return 0
}

// The MPTCP socket (the connection) carries its cgroup too.
func TestConnsCarryTheirCgroup(t *testing.T) {
	var mp netip.AddrPort
	fd := mptcpNetns(t, "mpobc", func() { mp = open(t, "tcp4", "127.0.0.1:0", true) })
	s, err := observe.NewSampler(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	conns, err := s.Conns()
	if err != nil {
		t.Fatal(err)
	}
	cg := ownCgroupID(t)
	for _, c := range conns {
		if c.Local == mp {
			if c.CgroupID != cg {
				t.Fatalf("connection %s: cgroup %d, want %d", mp, c.CgroupID, cg)
			}
			return
		}
	}
	t.Fatalf("connection %s not among %+v", mp, conns)
}

// Lookup finds one socket again, as sampled, with a sample's fields (a
// socket bound to a device too: a subflow from an endpoint with one is),
// and says ErrNoSocket for one that is gone.
func TestLookupFindsOneSocket(t *testing.T) {
	var mp, plain, bound netip.AddrPort
	fd := mptcpNetns(t, "mplook", func() {
		mp = open(t, "tcp4", "127.0.0.1:0", true)
		plain = open(t, "tcp6", "[::1]:0", false)
		bound = openBound(t, "lo")
	})
	s, err := observe.NewSampler(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	all, err := s.TCP()
	if err != nil {
		t.Fatal(err)
	}
	find := func(local netip.AddrPort) observe.Subflow {
		for _, sf := range all {
			if sf.Local == local {
				return sf
			}
		}
		t.Fatalf("the dump has no socket from %s: %v", local, all)
		return observe.Subflow{}
	}
	for _, local := range []netip.AddrPort{mp, plain, bound} {
		dumped := find(local)
		if dumped.MPTCP != (local == mp) || (dumped.Interface != 0) != (local == bound) {
			t.Fatalf("%s: MPTCP %v, bound to interface %d; want MPTCP only for %s, an interface only for %s", local, dumped.MPTCP, dumped.Interface, mp, bound)
		}
		got, err := s.Lookup(dumped)
		if err != nil {
			t.Fatalf("lookup %s→%s: %v", dumped.Local, dumped.Remote, err)
		}
		if got.Local != dumped.Local || got.Remote != dumped.Remote || got.Cookie != dumped.Cookie || got.MPTCP != dumped.MPTCP ||
			got.Token != dumped.Token || got.MPFlags != dumped.MPFlags || got.CC != dumped.CC || got.Interface != dumped.Interface || got.SRTT <= 0 {
			t.Errorf("lookup of %s→%s gave %+v, the dump %+v", dumped.Local, dumped.Remote, got, dumped)
		}
	}
	gone := find(mp)
	gone.Local = netip.AddrPortFrom(gone.Local.Addr(), gone.Local.Port()+1)
	other := find(mp)
	other.Cookie++ // the same four-tuple, another socket
	for _, sf := range []observe.Subflow{gone, other} {
		if _, err := s.Lookup(sf); err != observe.ErrNoSocket {
			t.Errorf("lookup of %s→%s cookie %d, which no socket has: %v, want ErrNoSocket", sf.Local, sf.Remote, sf.Cookie, err)
		}
	}
}

// openBound connects over IPv4 loopback with the client bound to the
// device dev, both ends open until the test ends.
func openBound(t *testing.T, dev string) netip.AddrPort {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err == nil {
			accepted <- c
		}
		close(accepted)
	}()
	d := net.Dialer{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) { serr = syscall.BindToDevice(int(fd), dev) }); err != nil {
			return err
		}
		return serr
	}}
	c, err := d.Dial("tcp4", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if sc, ok := <-accepted; ok {
		t.Cleanup(func() { sc.Close() })
	}
	return c.LocalAddr().(*net.TCPAddr).AddrPort()
}
