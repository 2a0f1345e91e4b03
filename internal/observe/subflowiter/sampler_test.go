package subflowiter_test

import (
	"errors"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"

	"golang.org/x/sys/unix"
)

// The iterator reports what inet_diag reports, subflow by subflow, on
// both ends of real MPTCP connections (initial subflows and joins, one
// join path marked backup so the flags differ), with the counters still:
// the connections are idle when both samples are taken.
func TestIteratorMatchesSockDiag(t *testing.T) {
	testutil.RequireLab(t)
	h := testutil.TwoHosts(t, 2)
	c := testutil.DialPM(t, h.Client)
	if err := c.SetLimits(pm.Limits{Subflows: 2, AddAddrAccepted: 2}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(2), Flags: pm.FlagSubflow | pm.FlagBackup}); err != nil {
		t.Fatal(err)
	}
	if err := testutil.DialPM(t, h.Server).SetLimits(pm.Limits{Subflows: 2, AddAddrAccepted: 2}); err != nil {
		t.Fatal(err)
	}
	testutil.ServeIn(t, h.Server, "0.0.0.0:5400", true, testutil.Discard)
	const conns = 4
	start := time.Now() // (before every connection)
	for i := 0; i < conns; i++ {
		var cn net.Conn
		if err := netnsutil.Do(h.Client, func() error {
			var d net.Dialer
			d.SetMultipathTCP(true)
			var err error
			cn, err = d.Dial("tcp", h.ServerAddr(1).String()+":5400")
			return err
		}); err != nil {
			t.Fatal(err)
		}
		defer cn.Close()
		// Two congestion controls among the subflows: each reports its
		// own, and BBR's subflows its state too.
		cc := "reno"
		if i%2 == 1 {
			cc = "bbr"
		}
		rc, err := cn.(*net.TCPConn).SyscallConn()
		if err != nil {
			t.Fatal(err)
		}
		rc.Control(func(fd uintptr) { err = unix.SetsockoptString(int(fd), unix.IPPROTO_TCP, unix.TCP_CONGESTION, cc) })
		if err != nil {
			t.Fatalf("TCP_CONGESTION %s: %v", cc, err)
		}
		cn.Write(make([]byte, 256<<10))
	}

	it, err := subflowiter.New()
	if errors.Is(err, ebpf.ErrNotSupported) {
		t.Skipf("this kernel lacks what the iterator needs; the daemon reads sock_diag here (its fallback): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer it.Close()
	for _, ns := range []string{h.Client, h.Server} {
		diag := testutil.Sampler(t, ns)
		var fromDiag, fromIter []observe.Subflow
		// Wait for every join, and for the data to be acknowledged.
		testutil.Eventually(t, 10*time.Second, func() error {
			if fromDiag, err = diag.Subflows(); err != nil {
				t.Fatal(err)
			}
			if len(fromDiag) != 2*conns || !idle(fromDiag) {
				return fmt.Errorf("%d subflows, want %d, all idle", len(fromDiag), 2*conns)
			}
			return nil
		})
		if err := netnsutil.Do(ns, func() error {
			fromIter, err = it.Subflows(nil)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		if len(fromDiag) != 2*conns || len(fromIter) != len(fromDiag) {
			t.Fatalf("%s: sock_diag %d subflows, iterator %d (want %d)", ns, len(fromDiag), len(fromIter), 2*conns)
		}
		byCookie := map[uint64]observe.Subflow{}
		for _, sf := range fromDiag {
			byCookie[sf.Cookie] = sf
		}
		backups := 0
		for _, got := range fromIter {
			want, ok := byCookie[got.Cookie]
			if !ok {
				t.Fatalf("%s: iterator reports cookie %d that sock_diag does not: %+v", ns, got.Cookie, got)
			}
			// Ages move between the two reads (jiffies: 4 ms at HZ=250).
			for _, d := range []time.Duration{got.LastDataSent - want.LastDataSent, got.LastAckRecv - want.LastAckRecv} {
				if d < 0 || d > time.Second {
					t.Errorf("%s %v: an age differs by %v", ns, got.Local, d)
				}
			}
			got.LastDataSent, got.LastAckRecv = want.LastDataSent, want.LastAckRecv
			checkBBR(t, ns, got, time.Since(start))
			got.BBR = observe.BBRState{} // (sock_diag does not read it)
			if got != want {
				t.Errorf("%s: subflow %v→%v\niterator   %+v\nsock_diag  %+v", ns, got.Local, got.Remote, got, want)
			}
			if got.Backup() {
				backups++
			}
		}
		ccs := map[string]int{}
		for _, sf := range fromIter {
			ccs[sf.CC]++
		}
		if ns == h.Client && len(ccs) != 2 {
			t.Errorf("%s: congestion controls %v, want two kinds", ns, ccs)
		}
		if backups != conns {
			t.Errorf("%s: %d backup subflows, want %d (the joins)", ns, backups, conns)
		}
	}
}

// checkBBR: a BBR subflow reports BBR's state, its min_rtt filter set no
// earlier than the test began (at the connection's start or since: these
// connections are young and idle, so in Startup or ProbeBW), and a
// subflow under another congestion control none.
func checkBBR(t *testing.T, ns string, sf observe.Subflow, since time.Duration) {
	t.Helper()
	if sf.CC != "bbr" {
		if sf.BBR.Known {
			t.Errorf("%s %v: %s subflow reports BBR state %+v", ns, sf.Local, sf.CC, sf.BBR)
		}
		return
	}
	if !sf.BBR.Known {
		t.Errorf("%s %v: a bbr subflow without BBR's state", ns, sf.Local)
		return
	}
	if age := sf.BBR.MinRTTAge; age < 0 || age > since+10*time.Millisecond {
		t.Errorf("%s %v: BBR's min_rtt set %v ago, but the test began %v ago", ns, sf.Local, age, since)
	}
	if m := sf.BBR.Mode; m != observe.BBRStartup && m != observe.BBRProbeBW && m != observe.BBRDrain {
		t.Errorf("%s %v: BBR mode %d, want Startup, Drain or ProbeBW on a young connection", ns, sf.Local, m)
	}
}

// The iterator reads struct bbr by offset (see subflows.bpf.c): they must
// be the running kernel's, in its BTF where BBR is built in, in the
// tcp_bbr module's where it is a module (loaded: the kernel matrix's
// guests load it).
func TestBBRLayout(t *testing.T) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		t.Skipf("no kernel BTF: %v", err)
	}
	var st *btf.Struct
	if err := spec.TypeByName("bbr", &st); err != nil {
		mod, merr := btf.LoadKernelModuleSpec("tcp_bbr")
		if merr != nil {
			t.Skipf("struct bbr is neither in vmlinux BTF (%v) nor in a loaded tcp_bbr module's (%v)", err, merr)
		}
		if err := mod.TypeByName("bbr", &st); err != nil {
			t.Fatalf("tcp_bbr's BTF has no struct bbr: %v", err)
		}
	}
	want := map[string][2]btf.Bits{"min_rtt_stamp": {32, 0}, "mode": {448, 3}}
	for _, m := range st.Members {
		w, ok := want[m.Name]
		if !ok {
			continue
		}
		delete(want, m.Name)
		if m.Offset != w[0] || m.BitfieldSize != w[1] {
			t.Errorf("struct bbr.%s at bit %d (%d bits); the iterator reads bit %d (%d bits)", m.Name, m.Offset, m.BitfieldSize, w[0], w[1])
		}
	}
	for name := range want {
		t.Errorf("struct bbr has no %s", name)
	}
}

func idle(sfs []observe.Subflow) bool {
	for _, sf := range sfs {
		if sf.Unacked != 0 || sf.NotSent != 0 || sf.SRTT == 0 {
			return false
		}
	}
	return true
}
