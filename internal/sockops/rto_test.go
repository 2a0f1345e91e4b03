package sockops

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/netnsutil"
)

// Subflows established before the RTO program was there (a policy given
// at run time) get what it gives new ones from the iterator: the RTO cap
// of their local address and TCP_NOTSENT_LOWAT; plain TCP sockets are
// left alone.
func TestApplyToExistingSubflows(t *testing.T) {
	ns := vethNS(t, "mpsteer-rtoex-", "10.9.0.1/24")
	const mptcp = 262 // IPPROTO_MPTCP
	var cookie uint64
	var fds []int
	t.Cleanup(func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	})
	// One MPTCP and one plain TCP connection to listeners in the
	// namespace, before the program is loaded.
	err := netnsutil.Do(ns, func() error {
		var err error
		if cookie, err = bpfutil.NetNSCookie(); err != nil {
			return err
		}
		for _, proto := range []int{mptcp, unix.IPPROTO_TCP} {
			ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, proto)
			if err != nil {
				return fmt.Errorf("socket (protocol %d): %w", proto, err)
			}
			fds = append(fds, ln)
			if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{10, 9, 0, 1}}); err != nil {
				return err
			}
			if err := unix.Listen(ln, 4); err != nil {
				return err
			}
			sa, err := unix.Getsockname(ln)
			if err != nil {
				return err
			}
			c, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, proto)
			if err != nil {
				return err
			}
			fds = append(fds, c)
			if err := unix.Connect(c, &unix.SockaddrInet4{Port: sa.(*unix.SockaddrInet4).Port, Addr: [4]byte{10, 9, 0, 1}}); err != nil {
				return err
			}
			a, _, err := unix.Accept(ln)
			if err != nil {
				return err
			}
			fds = append(fds, a)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	r, err := NewRTOCapper(cookie)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	if err := r.Set(map[netip.Addr]time.Duration{netip.MustParseAddr("10.9.0.1"): time.Second}); err != nil {
		t.Fatal(err)
	}
	// A congestion control the subflows do not run excepted: nothing
	// changes.
	if err := netnsutil.Do(ns, func() error { return r.ApplyToExisting(16<<10, []string{"nosuchcc"}) }); err != nil {
		t.Fatal(err)
	}
	// Two subflows (the client's and the server's), two options each; the
	// plain TCP sockets counted nowhere.
	st := r.Stats()
	if st["existing_set"]+st["existing_failed"] != 4 || st["existing_set"] < 2 || st["existing_lowat_excepted"] != 0 {
		t.Fatalf("stats %v: want both options tried on both subflows (4), TCP_NOTSENT_LOWAT set at least, none excepted", st)
	}
	if st["existing_failed"] != 0 {
		t.Logf("TCP_RTO_MAX_MS refused on existing subflows (a kernel before 6.15?): %v", st)
	}
	// The subflows' own congestion control (the namespace's default)
	// excepted: the RTO cap alone is tried on each, the lowat left alone.
	var cc []byte
	if err := netnsutil.Do(ns, func() error {
		var err error
		cc, err = os.ReadFile("/proc/sys/net/ipv4/tcp_congestion_control")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	name := strings.TrimSpace(string(cc))
	if err := netnsutil.Do(ns, func() error { return r.ApplyToExisting(16<<10, []string{"nosuchcc", name}) }); err != nil {
		t.Fatal(err)
	}
	st2 := r.Stats()
	tried := st2["existing_set"] + st2["existing_failed"] - st["existing_set"] - st["existing_failed"]
	if st2["existing_lowat_excepted"] != 2 || tried != 2 {
		t.Fatalf("stats %v (before %v): with %q excepted, want both subflows' lowat left alone (2) and only their RTO cap tried (2, got %d)", st2, st, name, tried)
	}
}
