package spread_test

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"

	"github.com/vishvananda/netlink"

	"mpsteer/internal/datapath/spread"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

func TestCheck(t *testing.T) {
	up := []spread.Uplink{{Dev: "phy1"}, {Dev: "phy2", Gateway: netip.MustParseAddr("10.0.2.2")}}
	cases := map[string]spread.Config{
		"":                           {From: []string{"br0"}, Uplinks: up},
		"no VM-facing device":        {Uplinks: up},
		"1 uplinks given":            {From: []string{"br0"}, Uplinks: up[:1]},
		"device phy1 is named twice": {From: []string{"phy1"}, Uplinks: up},
		"gateway ::1 is not an IPv4": {From: []string{"br0"}, Uplinks: []spread.Uplink{{Dev: "a", Gateway: netip.MustParseAddr("::1")}, {Dev: "b"}}},
		"17 uplinks given; spreading needs 2 to 16": {From: []string{"br0"}, Uplinks: make([]spread.Uplink, 17)},
	}
	for want, c := range cases {
		err := c.Check()
		if (want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), want) {
			t.Errorf("%+v: %v, want %q", c, err, want)
		}
	}
}

// The programs pass the verifier and attach; the rules and routes are
// there while installed and gone after Close; an uplink taken down is
// skipped and gets its route back when it comes up.
func TestInstallSyncClose(t *testing.T) {
	testutil.RequireRoot(t, "loading BPF programs and making network namespaces")
	ns := fmt.Sprintf("mpsteer-spread-%d", os.Getpid())
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	defer netnsutil.Delete(ns)
	h, err := netnsutil.Netlink(ns)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	for i, d := range []string{"vmbr0", "up1", "up2"} {
		if err := h.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: d}, PeerName: d + "p"}); err != nil {
			t.Fatal(err)
		}
		if p, err := h.LinkByName(d + "p"); err == nil {
			h.LinkSetUp(p)
		}
		l, _ := h.LinkByName(d)
		a, _ := netlink.ParseAddr(fmt.Sprintf("10.0.%d.1/24", i))
		h.AddrAdd(l, a)
		h.LinkSetUp(l)
	}
	rules := func() int {
		rs, _ := h.RuleList(netlink.FAMILY_V4)
		n := 0
		for _, r := range rs {
			if r.Mark != 0 {
				n++
			}
		}
		return n
	}
	routes := func(table int) int {
		rs, _ := h.RouteListFiltered(netlink.FAMILY_V4, &netlink.Route{Table: table}, netlink.RT_FILTER_TABLE)
		return len(rs)
	}
	cfg := spread.Config{From: []string{"vmbr0"}, Uplinks: []spread.Uplink{{Dev: "up1", Gateway: netip.MustParseAddr("10.0.1.2")}, {Dev: "up2"}},
		MarkBase: spread.DefaultMarkBase, TableBase: spread.DefaultTableBase, Priority: spread.DefaultPriority}
	var s *spread.Spread
	err = netnsutil.Do(ns, func() error {
		var err error
		s, err = spread.Install(cfg)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if rules() != 2 || routes(cfg.Table(0)) != 1 || routes(cfg.Table(1)) != 1 {
		t.Fatalf("installed: %d rules, routes %d and %d; want 2, 1 and 1", rules(), routes(cfg.Table(0)), routes(cfg.Table(1)))
	}
	st := s.Stats()
	if len(st.Uplinks) != 2 || !st.Uplinks[0].Alive || st.Uplinks[1].Mark != "0x5351" || st.Uplinks[0].Gateway != "10.0.1.2" || len(st.Counters) != 3 {
		t.Fatalf("stats %+v", st)
	}
	l, _ := h.LinkByName("up2")
	h.LinkSetDown(l)
	var changes []string
	netnsutil.Do(ns, func() error { changes = s.Sync(); return nil })
	if len(changes) != 1 || s.Stats().Uplinks[1].Alive || routes(cfg.Table(1)) != 0 {
		t.Errorf("up2 down: changes %v, stats %+v, %d routes in its table", changes, s.Stats().Uplinks[1], routes(cfg.Table(1)))
	}
	h.LinkSetUp(l)
	netnsutil.Do(ns, func() error { changes = s.Sync(); return nil })
	if len(changes) != 1 || !s.Stats().Uplinks[1].Alive || routes(cfg.Table(1)) != 1 {
		t.Errorf("up2 up again: changes %v, stats %+v, %d routes in its table", changes, s.Stats().Uplinks[1], routes(cfg.Table(1)))
	}
	netnsutil.Do(ns, func() error { return s.Close() })
	if rules() != 0 || routes(cfg.Table(0)) != 0 || routes(cfg.Table(1)) != 0 {
		t.Fatalf("after Close: %d rules, routes %d and %d", rules(), routes(cfg.Table(0)), routes(cfg.Table(1)))
	}
	// An uplink that does not exist: nothing is left.
	cfg.Uplinks[1].Dev = "up9"
	err = netnsutil.Do(ns, func() error { _, err := spread.Install(cfg); return err })
	if err == nil || !strings.Contains(err.Error(), "uplink up9") || rules() != 0 || routes(cfg.Table(0)) != 0 {
		t.Fatalf("missing uplink: %v; %d rules, %d routes left", err, rules(), routes(cfg.Table(0)))
	}
}
