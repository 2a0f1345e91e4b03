package reliability

import (
	"context"
	"fmt"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netlink"

	"mpsteer/internal/datapath"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// TestKilledDaemonsTcChainsFailOpen: where chains sit on a tc clsact
// qdisc (kernels before 6.6 have no TCX), a chain's filter outlives a
// daemon killed with SIGKILL. The chain's lease (datapath/lease.go) runs
// out with the daemon, and from then on the filter, still on the device,
// passes every packet. The chain here drops every TCP packet out of
// veth1: while the daemon lives no connection opens over link 1; once
// it is killed one does within the lease, with the filter still there.
func TestKilledDaemonsTcChainsFailOpen(t *testing.T) {
	w := newWorld(t, 2, false)
	t.Setenv(datapath.AttachEnv, string(datapath.AttachClsact))
	srv := w.h.ServerAddr(1).String() + ":7310"
	testutil.ServeIn(t, w.h.Server, srv, false, nil)
	dial := func() error {
		return netnsutil.Do(w.h.Client, func() error {
			d := net.Dialer{Timeout: 300 * time.Millisecond, LocalAddr: &net.TCPAddr{IP: w.h.ClientAddr(1).AsSlice()}}
			c, err := d.DialContext(context.Background(), "tcp", srv)
			if err == nil {
				c.Close()
			}
			return err
		})
	}
	if err := dial(); err != nil {
		t.Fatalf("link 1 before any chain: %v", err)
	}

	d := testutil.StartDaemon(t, w.h.Client, "chains:\n  - {id: 1, dev: veth1, hook: egress, select: 'dst(10.0.0.0/8)', act: drop}\n")
	var chains []datapath.ChainStatus
	if err := d.Client.Do("GET", "/v1/chains", nil, &chains); err != nil || len(chains) != 1 || chains[0].Attach != "tc clsact" {
		t.Fatalf("want one chain on tc clsact: %+v %v", chains, err)
	}
	if err := dial(); err == nil {
		t.Fatal("a connection opened over link 1 through a chain that drops every packet")
	}
	testutil.Eventually(t, 5*time.Second, func() error {
		if err := d.Client.Do("GET", "/v1/chains", nil, &chains); err != nil {
			return err
		}
		if chains[0].Dropped == 0 {
			return fmt.Errorf("the chain dropped nothing: %+v", chains[0])
		}
		return nil
	})

	d.Stop(syscall.SIGKILL)
	killed := time.Now()
	filters := func() (n int) {
		netnsutil.Do(w.h.Client, func() error {
			l, err := netlink.LinkByName("veth1")
			if err != nil {
				return err
			}
			fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_EGRESS)
			for _, f := range fs {
				if b, ok := f.(*netlink.BpfFilter); ok && strings.HasPrefix(b.Name, "mpsteer-") {
					n++
				}
			}
			return err
		})
		return n
	}
	if n := filters(); n != 1 {
		t.Fatalf("after the kill: %d mpsteer filters on veth1's egress, want the killed daemon's one", n)
	}
	testutil.Eventually(t, datapath.LeaseTTL+5*time.Second, dial)
	t.Logf("link 1 open again %v after the kill (lease %v)", time.Since(killed).Round(10*time.Millisecond), datapath.LeaseTTL)
	if n := filters(); n != 1 {
		t.Fatalf("the filter went (%d left): the test did not show that the lease let packets through it", n)
	}
}
