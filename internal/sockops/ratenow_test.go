package sockops

import (
	"net/netip"
	"testing"

	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/netnsutil"
)

// A cap set on a connection that sends nothing (a backup subflow) is on
// its socket at once, not on an ACK that would come only after it sent,
// with the TCP_NOTSENT_LOWAT that comes with it; lifting it is as
// immediate and gives the socket its own TCP_NOTSENT_LOWAT back; the
// connection's other end is left alone.
func TestPacerCapsAnIdleSocketAtOnce(t *testing.T) {
	ns := vethNS(t, "mpsteer-ratenow-", "10.9.0.1/24")
	var cookie uint64
	var client, server int
	var sf Subflow4
	err := netnsutil.Do(ns, func() error {
		var err error
		if cookie, err = bpfutil.NetNSCookie(); err != nil {
			return err
		}
		ln, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP)
		if err != nil {
			return err
		}
		defer unix.Close(ln)
		if err := unix.Bind(ln, &unix.SockaddrInet4{Addr: [4]byte{10, 9, 0, 1}}); err != nil {
			return err
		}
		if err := unix.Listen(ln, 1); err != nil {
			return err
		}
		lsa, err := unix.Getsockname(ln)
		if err != nil {
			return err
		}
		if client, err = unix.Socket(unix.AF_INET, unix.SOCK_STREAM, unix.IPPROTO_TCP); err != nil {
			return err
		}
		if err := unix.Connect(client, lsa); err != nil {
			return err
		}
		if server, _, err = unix.Accept(ln); err != nil {
			return err
		}
		csa, err := unix.Getsockname(client)
		if err != nil {
			return err
		}
		addr := netip.AddrFrom4([4]byte{10, 9, 0, 1})
		sf = Subflow4{Local: netip.AddrPortFrom(addr, uint16(csa.(*unix.SockaddrInet4).Port)),
			Remote: netip.AddrPortFrom(addr, uint16(lsa.(*unix.SockaddrInet4).Port))}
		return nil
	})
	t.Cleanup(func() { unix.Close(client); unix.Close(server) })
	if err != nil {
		t.Fatal(err)
	}
	p, err := NewPacer(cookie, ByPacing)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close(0)
	if err := p.AtOnceErr(); err != nil {
		t.Fatalf("caps are not applied at once on this kernel: %v", err)
	}
	pacing := func(fd int) uint64 {
		v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_MAX_PACING_RATE)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	notsent := func(fd int) int {
		v, err := unix.GetsockoptInt(fd, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const own = 100_000 // the socket's own TCP_NOTSENT_LOWAT
	if err := unix.SetsockoptInt(client, unix.IPPROTO_TCP, unix.TCP_NOTSENT_LOWAT, own); err != nil {
		t.Fatal(err)
	}
	set := func(want map[Subflow4]Cap) {
		t.Helper()
		if err := netnsutil.Do(ns, func() error { return p.Set(want) }); err != nil {
			t.Fatal(err)
		}
	}
	const capBps, held = 250_000, 3000 // 2 Mbit/s, 3000 B unsent at most
	set(map[Subflow4]Cap{sf: {Rate: capBps, NotSent: held}})
	if got := pacing(client); got != capBps {
		t.Fatalf("the idle socket's maximum pacing rate is %d B/s right after Set, want %d B/s", got, capBps)
	}
	if got := notsent(client); got != held {
		t.Fatalf("the idle socket's TCP_NOTSENT_LOWAT is %d B right after Set, want %d B", got, held)
	}
	if got := pacing(server); got == capBps {
		t.Fatalf("the other end was capped too (%d B/s)", got)
	}
	if got := notsent(server); got == held {
		t.Fatalf("the other end's TCP_NOTSENT_LOWAT was changed too (%d B)", got)
	}
	if st := p.Stats(); st["set_at_once"] != 1 || st["notsent_set_at_once"] != 1 || st["failed_at_once"] != 0 {
		t.Fatalf("stats %v: want one cap and one TCP_NOTSENT_LOWAT set at once, none failed", st)
	}
	if _, ok := p.Applied(sf); !ok {
		t.Fatal("Applied: the cap is not reported taken")
	}
	// The cap changes, the bound stays: the socket's own value is kept.
	set(map[Subflow4]Cap{sf: {Rate: capBps / 10, NotSent: held}})
	if got := pacing(client); got != capBps/10 {
		t.Fatalf("after a change the socket's maximum pacing rate is %d B/s, want %d B/s", got, capBps/10)
	}
	set(nil)
	if got := pacing(client); got < Unlimited {
		t.Fatalf("after the cap was lifted the socket's maximum pacing rate is %d B/s, want none (≥ %d)", got, Unlimited)
	}
	if got := notsent(client); got != own {
		t.Fatalf("after the cap was lifted the socket's TCP_NOTSENT_LOWAT is %d B, want its own %d B back", got, own)
	}
	// The entry went with the lifting; a cap without a bound leaves the
	// socket's TCP_NOTSENT_LOWAT alone.
	p.Forget(func(Subflow4) bool { return true })
	if _, ok := p.Applied(sf); ok {
		t.Fatal("Forget kept the entry of a lifted cap the socket had taken")
	}
	k := flowKey(sf)
	var d rateRateDone
	if err := p.objs.RateDone.Lookup(&k, &d); err == nil {
		t.Fatalf("Forget left what the programs did with the lifted cap behind (rate_done: %+v)", d)
	}
	set(map[Subflow4]Cap{sf: {Rate: capBps}})
	if got := notsent(client); got != own {
		t.Fatalf("a cap without a bound changed TCP_NOTSENT_LOWAT to %d B (own %d B)", got, own)
	}
	set(nil)
}
