package actuator

import (
	"net/netip"
	"testing"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// Decisions fold per address (backup only if every decided subflow from
// it is); a subflow whose own flag disagrees is stale once its join has
// completed, and only reported as still joining before (an MP_PRIO sent
// then would miss it).
func TestWantPerAddressFoldsAndSeesJoinsInProgress(t *testing.T) {
	mk := func(local string, backupLocal bool, flags uint32) observe.Subflow {
		return observe.Subflow{Local: netip.MustParseAddrPort(local), Remote: netip.MustParseAddrPort("10.9.0.2:80"),
			Cookie: 1, State: observe.TCPEstablished, BackupLocal: backupLocal, MPFlags: flags}
	}
	joined := uint32(observe.FlagJoinLoc | observe.FlagFullyEst)
	joining := uint32(observe.FlagJoinLoc)
	a1, a2 := mk("10.1.0.1:1000", false, 0), mk("10.1.0.1:1001", false, joined)
	b1 := mk("10.2.0.1:1000", true, joining) // to become usable, still joining
	dec := map[policy.SubflowID]policy.Action{
		policy.ID(a1): {Backup: true, Reason: "r1", Policy: "p"},
		policy.ID(a2): {Backup: false, Reason: "r2", Policy: "q"},
		policy.ID(b1): {Backup: false, Reason: "r3", Policy: "p"},
	}
	want, reason, who, stale, stillJoining := wantPerAddress(dec, []observe.Subflow{a1, a2, b1})
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	if want[a] || want[b] {
		t.Fatalf("want %v: a subflow of each address wants it usable", want)
	}
	if reason[a] != "r2" || who[a] != "q" {
		t.Fatalf("address %v: reason %q by %q, want the usable decision's", a, reason[a], who[a])
	}
	if stale[a] || stale[b] || len(stillJoining) != 1 || stillJoining[0].Local != b1.Local {
		t.Fatalf("stale %v, still joining %v: want none stale and b's join reported", stale, stillJoining)
	}
	// b's join completes with its flag still set: stale now.
	b1.MPFlags = joined
	_, _, _, stale, stillJoining = wantPerAddress(dec, []observe.Subflow{a1, a2, b1})
	if !stale[b] || len(stillJoining) != 0 {
		t.Fatalf("after the join: stale %v, still joining %v; want b stale", stale, stillJoining)
	}
}
