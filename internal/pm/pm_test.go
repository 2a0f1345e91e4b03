package pm_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
	"mpsteer/internal/timescale"
)

func TestFlagsStringAndParse(t *testing.T) {
	f, err := pm.ParseFlags("subflow, backup")
	if err != nil || f != pm.FlagSubflow|pm.FlagBackup || f.String() != "subflow,backup" {
		t.Fatalf("ParseFlags = %v (%s), %v", f, f, err)
	}
	if _, err := pm.ParseFlags("subflow,fast"); err == nil || !strings.Contains(err.Error(), `unknown endpoint flag "fast"`) {
		t.Fatalf("err = %v", err)
	}
}

func listenNS(t *testing.T, ns string) *pm.EventListener {
	t.Helper()
	l, err := pm.ListenEvents(pm.Options{NetNSName: ns})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// waitEvent reads events until one matches or the time runs out (5 s,
// stretched where everything runs slower: timescale).
func waitEvent(t *testing.T, l *pm.EventListener, what string, match func(pm.Event) bool) pm.Event {
	t.Helper()
	ev, err := nextEvent(l, what, match)
	if err != nil {
		t.Fatal(err)
	}
	return ev
}

func nextEvent(l *pm.EventListener, what string, match func(pm.Event) bool) (pm.Event, error) {
	deadline := time.Now().Add(timescale.Scaled(5 * time.Second))
	l.SetDeadline(deadline)
	for time.Now().Before(deadline) {
		evs, err := l.Receive()
		if err != nil {
			return pm.Event{}, fmt.Errorf("waiting for %s: %w", what, err)
		}
		for _, ev := range evs {
			if match(ev) {
				return ev, nil
			}
		}
	}
	return pm.Event{}, fmt.Errorf("no %s event", what)
}

// counterMoves names the MPTCP MIB counters of a namespace that moved
// since before, for a failure's message.
func counterMoves(t *testing.T, ns string, before observe.MPTCPCounters, names ...string) string {
	t.Helper()
	now := testutil.MPTCPCounters(t, ns).Since(before)
	var parts []string
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%s +%d", n, now[n]))
	}
	return ns + ": " + strings.Join(parts, ", ")
}

func TestKernelPathManagerEndpointsAndLimits(t *testing.T) {
	testutil.RequireLab(t)
	h := testutil.TwoHosts(t, 2)
	c := testutil.DialPM(t, h.Client)

	if err := c.SetLimits(pm.Limits{AddAddrAccepted: 3, Subflows: 4}); err != nil {
		t.Fatal(err)
	}
	if l, err := c.Limits(); err != nil || l != (pm.Limits{AddAddrAccepted: 3, Subflows: 4}) {
		t.Fatalf("limits %+v, %v", l, err)
	}
	// The kernel's own message comes back in the error.
	err := c.SetLimits(pm.Limits{Subflows: 9})
	if err == nil || !strings.Contains(err.Error(), "limit greater than maximum") || !errors.Is(err, unix.EINVAL) {
		t.Fatalf("limit 9: err = %v, want the kernel's extack and EINVAL", err)
	}

	e1, err := c.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(2), Flags: pm.FlagSubflow})
	if err != nil {
		t.Fatal(err)
	}
	if e1.ID == 0 || e1.Flags != pm.FlagSubflow {
		t.Fatalf("added %v", e1)
	}
	e2, err := c.AddEndpoint(pm.Endpoint{ID: 42, Addr: h.ClientAddr(1), Port: 6000, Flags: pm.FlagSignal})
	if err != nil {
		t.Fatal(err)
	}
	if e2.ID != 42 || e2.Port != 6000 {
		t.Fatalf("added %v, want id 42 port 6000 (ports are host byte order)", e2)
	}
	got, err := c.GetEndpoint(42)
	if err != nil || got != e2 {
		t.Fatalf("get 42 = %v, %v; want %v", got, err, e2)
	}
	if _, err := c.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(2), Flags: pm.FlagSubflow}); err == nil {
		t.Fatal("a duplicate endpoint was accepted")
	}
	// Backup on, by id.
	if err := c.SetEndpointFlags(pm.Endpoint{ID: e1.ID, Flags: pm.FlagBackup}); err != nil {
		t.Fatal(err)
	}
	if got, _ := c.GetEndpoint(e1.ID); got.Flags != pm.FlagSubflow|pm.FlagBackup {
		t.Fatalf("after set-flags: %v", got)
	}
	if err := c.DelEndpoint(pm.Endpoint{ID: 42}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetEndpoint(42); err == nil {
		t.Fatal("endpoint 42 still there after del")
	}
	if err := c.FlushEndpoints(); err != nil {
		t.Fatal(err)
	}
	if eps, err := c.Endpoints(); err != nil || len(eps) != 0 {
		t.Fatalf("after flush: %v, %v", eps, err)
	}
}

// server accepts one MPTCP connection and drains it.
func server(t *testing.T, ns string, addr netip.AddrPort) {
	t.Helper()
	var ln net.Listener
	err := netnsutil.Do(ns, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		io.Copy(io.Discard, c)
		c.Close()
	}()
}

func dialMPTCP(t *testing.T, ns string, addr netip.AddrPort) net.Conn {
	t.Helper()
	var c net.Conn
	err := netnsutil.Do(ns, func() error {
		var d net.Dialer
		d.SetMultipathTCP(true)
		var err error
		c, err = d.Dial("tcp", addr.String())
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestUserspacePathManagerAndEvents(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireFeature(t, kernelfeat.UserspacePM)
	h := testutil.TwoHosts(t, 2)
	if err := netnsutil.SetPathManager(h.Client, "userspace"); err != nil {
		t.Fatal(err)
	}
	srv := testutil.DialPM(t, h.Server)
	if err := srv.SetLimits(pm.Limits{AddAddrAccepted: 4, Subflows: 4}); err != nil {
		t.Fatal(err)
	}
	cl := testutil.DialPM(t, h.Client)
	cev := listenNS(t, h.Client)
	sev := listenNS(t, h.Server)

	remote := netip.AddrPortFrom(h.ServerAddr(1), 7000)
	server(t, h.Server, remote)
	conn := dialMPTCP(t, h.Client, remote)
	// MPTCP is fully established (and says so) once data has been acked.
	conn.Write(make([]byte, 1000))
	est := waitEvent(t, cev, "established", func(e pm.Event) bool { return e.Type == pm.EventEstablished })
	if est.Remote != remote || est.Token == 0 || est.Local.Addr() != h.ClientAddr(1) {
		t.Fatalf("established %v", est)
	}
	token := est.Token

	// Announce a second address; the server hears of it.
	if err := cl.Announce(token, pm.Endpoint{ID: 5, Addr: h.ClientAddr(2)}); err != nil {
		t.Fatal(err)
	}
	ann := waitEvent(t, sev, "announced", func(e pm.Event) bool { return e.Type == pm.EventAnnounced })
	if ann.RemoteID != 5 || ann.Remote.Addr() != h.ClientAddr(2) {
		t.Fatalf("announced %v", ann)
	}

	// Open a subflow from it.
	if err := cl.SubflowCreate(token, pm.Endpoint{ID: 5, Addr: h.ClientAddr(2)}, remote); err != nil {
		t.Fatal(err)
	}
	sub := waitEvent(t, cev, "sub_established", func(e pm.Event) bool {
		return e.Type == pm.EventSubEstablished && e.Local.Addr() == h.ClientAddr(2)
	})
	if sub.Remote != remote || sub.LocalID != 5 || sub.Local.Port() == 0 {
		t.Fatalf("sub_established %v (ports must come out in host order)", sub)
	}
	conn.Write(make([]byte, 64<<10))

	// Mark it backup; the peer gets MP_PRIO and reports it.
	if err := cl.SetSubflowFlags(token, sub.Local, sub.Remote, pm.FlagBackup); err != nil {
		t.Fatal(err)
	}
	prio := waitEvent(t, sev, "sub_priority", func(e pm.Event) bool { return e.Type == pm.EventSubPriority })
	if !prio.Backup || prio.Remote.Addr() != h.ClientAddr(2) {
		t.Fatalf("sub_priority %v", prio)
	}
	// And the kernel's own view (inet_diag) says so.
	smp := testutil.Sampler(t, h.Client)
	sfs, err := smp.Subflows()
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, sf := range sfs {
		if sf.Local == sub.Local {
			found = true
			if !sf.BackupLocal || sf.Token != token || sf.LocalID != 5 {
				t.Fatalf("diag of the subflow: %+v", sf)
			}
		}
	}
	if !found {
		t.Fatalf("subflow %v not in diag %+v", sub.Local, sfs)
	}

	// A per-subflow change in a kernel-PM namespace is refused, with the
	// kernel's reason (Linux 6.1 gives EINVAL alone: its
	// mptcp_userspace_pm_set_flags has no extack message).
	err = srv.SetSubflowFlags(prio.Token, prio.Local, prio.Remote, pm.FlagBackup)
	if err == nil || !errors.Is(err, unix.EINVAL) ||
		(err.Error() != "mptcp_pm set-flags: invalid argument" && !strings.Contains(err.Error(), "userspace PM not selected")) {
		t.Fatalf("per-subflow flags under the kernel PM: %v, want EINVAL (with the reason \"userspace PM not selected\" where the kernel gives one)", err)
	}

	if err := cl.SubflowDestroy(token, sub.Local, sub.Remote); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, cev, "sub_closed", func(e pm.Event) bool { return e.Type == pm.EventSubClosed && e.Local == sub.Local })
	// Destroying its last subflow retired id 5; announce again and take the
	// announcement back. The kernel sends a REMOVE_ADDR once, with no echo
	// to wait for (an ADD_ADDR has one, and is sent again without it), and
	// drops one while another signal of the connection waits
	// (RmAddrTxDrop): one went missing in a CI run on 6.12 under software
	// emulation, and in none of 345 runs of this test on 6.12 and 15 on 6.1
	// since. So up to three tries, each with a fresh id and each miss
	// logged with the counters that say where it went; a third miss fails.
	for id := uint8(6); ; id++ {
		if err := cl.Announce(token, pm.Endpoint{ID: id, Addr: h.ClientAddr(2)}); err != nil {
			t.Fatal(err)
		}
		waitEvent(t, sev, "announced", func(e pm.Event) bool { return e.Type == pm.EventAnnounced && e.RemoteID == id })
		cBefore, sBefore := testutil.MPTCPCounters(t, h.Client), testutil.MPTCPCounters(t, h.Server)
		if err := cl.Remove(token, id); err != nil {
			t.Fatal(err)
		}
		_, err := nextEvent(sev, "removed", func(e pm.Event) bool { return e.Type == pm.EventRemoved && e.RemoteID == id })
		if err == nil {
			break
		}
		msg := fmt.Sprintf("id %d: %v (%s; %s)", id, err,
			counterMoves(t, h.Client, cBefore, "RmAddrTx", "RmAddrTxDrop"),
			counterMoves(t, h.Server, sBefore, "RmAddr", "RmAddrDrop"))
		if id == 8 {
			t.Fatal(msg)
		}
		t.Log(msg + ": again")
	}

	conn.Close()
	waitEvent(t, cev, "closed", func(e pm.Event) bool { return e.Type == pm.EventClosed && e.Token == token })
}

func TestListenerEvents(t *testing.T) {
	testutil.RequireLab(t)
	testutil.RequireFeature(t, kernelfeat.ListenerEvents)
	h := testutil.TwoHosts(t, 1)
	sev := listenNS(t, h.Server)
	addr := netip.AddrPortFrom(h.ServerAddr(1), 7001)
	var ln net.Listener
	netnsutil.Do(h.Server, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", addr.String())
		return err
	})
	created := waitEvent(t, sev, "listener_created", func(e pm.Event) bool { return e.Type == pm.EventListenerCreated })
	if created.Local != addr {
		t.Fatalf("listener_created %v, want %v", created, addr)
	}
	ln.Close()
	waitEvent(t, sev, "listener_closed", func(e pm.Event) bool { return e.Type == pm.EventListenerClosed && e.Local == addr })
}
