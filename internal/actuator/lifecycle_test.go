package actuator

import (
	"net/netip"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/netnsutil"
	"mpsteer/internal/policy"
)

// Under the kernel path manager no lifecycle action is sent to the kernel:
// each comes back unsupported, with the reason and the way out.
func TestLifecycleUnderTheKernelPathManager(t *testing.T) {
	a := NewLifecycle(nil, policy.KernelPM)
	sf := policy.NewSubflowID(netip.MustParseAddrPort("10.1.0.1:0"), netip.MustParseAddrPort("10.1.0.2:80"))
	var acts []policy.Action
	for _, k := range []policy.Kind{policy.Create, policy.Destroy, policy.Announce, policy.Withdraw} {
		acts = append(acts, policy.Action{Kind: k, Token: 1, Subflow: sf, Addr: sf.Local.AddrPort(), Policy: "fullmesh"})
	}
	for _, o := range a.Apply(acts, nil, time.Now()) {
		if o.Result != policy.Unsupported || !strings.Contains(o.Error, netnsutil.UserspacePMSetting()) {
			t.Fatalf("%s under the kernel PM: %s %q", o.Action.Kind, o.Result, o.Error)
		}
	}
}

// Local ids: 0 for the connection's own address, one per other address
// (and per explicit port), taken from the kernel's subflows when it has
// them already.
func TestLocalIDs(t *testing.T) {
	a := NewLifecycle(nil, policy.UserspacePM)
	c := &policy.Conn{Token: 1, Local: netip.MustParseAddrPort("10.1.0.1:40000")}
	ids := a.idsOf(1, c)
	if id := ids.byAddr[netip.MustParseAddrPort("10.1.0.1:0")]; id != 0 {
		t.Fatalf("own address id %d", id)
	}
	x, _ := ids.next(netip.MustParseAddrPort("10.2.0.1:0"))
	y, _ := ids.next(netip.MustParseAddrPort("10.2.0.1:41000"))
	if x == 0 || y == 0 || x == y {
		t.Fatalf("ids %d %d: want distinct, non-zero", x, y)
	}
}
