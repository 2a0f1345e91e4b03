package policy

import (
	"encoding/csv"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"testing"
	"time"

	"mpsteer/internal/observe"
)

// replay loads a recorded subflows.csv (client side of a lab run, written
// by the recorder and trimmed to the columns policies read) as snapshots,
// one per sampling time.
func replay(t *testing.T, file string) ([]*Snapshot, map[string]string) {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	col := map[string]int{}
	for i, h := range rows[0] {
		col[h] = i
	}
	num := func(r []string, k string) float64 {
		v, err := strconv.ParseFloat(r[col[k]], 64)
		if err != nil {
			t.Fatalf("%s: column %s: %v", file, k, err)
		}
		return v
	}
	dur := func(r []string, k string) time.Duration { return time.Duration(num(r, k) * float64(time.Millisecond)) }
	base := time.Unix(1000, 0)
	var snaps []*Snapshot
	pathOf := map[string]string{}
	var cur *Snapshot
	for _, r := range rows[1:] {
		ts := base.Add(time.Duration(num(r, "time_s") * float64(time.Second)))
		if cur == nil || !cur.Now.Equal(ts) {
			cur = &Snapshot{Now: ts, Conns: []*Conn{{Token: 1}}}
			snaps = append(snaps, cur)
		}
		local := netip.MustParseAddrPort(r[col["local"]])
		pathOf[local.Addr().String()] = r[col["path"]]
		cur.Conns[0].Subflows = append(cur.Conns[0].Subflows, observe.Subflow{
			Local: local, Remote: netip.MustParseAddrPort(r[col["remote"]]), Token: 1, MPTCP: true, LocalID: uint8(num(r, "local_id")),
			SRTT: dur(r, "srtt_ms"), Cwnd: uint32(num(r, "cwnd_pkts")), MSS: uint32(num(r, "mss_bytes")),
			BytesAcked: uint64(num(r, "bytes_acked")), Unacked: uint32(num(r, "unacked_pkts")),
			LastAckRecv: dur(r, "last_ack_recv_ms"), Backoff: uint8(num(r, "backoff")), CAState: uint8(num(r, "ca_state")),
		})
	}
	return snaps, pathOf
}

// A recorded lab run: the demo's two 10 mbit/10 ms paths, cell down from
// 7 s to 10 s; the subflow on cell recovers at its next RTO (12.4 s).
func TestPreferReplaysAnOutage(t *testing.T) {
	snaps, pathOf := replay(t, "testdata/demo-mptcp-cell-outage.csv")
	p := NewPrefer(Env{})
	p.SetTargets([]string{"10.2.0.1"}) // cell
	var off, on time.Duration = -1, -1
	t0 := snaps[0].Now
	for _, s := range snaps {
		at := s.Now.Sub(t0)
		d := map[string]bool{}
		for _, x := range p.Decide(s) {
			d[pathOf[x.Subflow.Local.Addr().String()]] = x.Backup
		}
		switch {
		case at < 7*time.Second:
			if d["cell"] || !d["wifi"] {
				t.Fatalf("at %v before the outage: %v, want cell preferred", at, d)
			}
		case at < 10*time.Second:
			if d["cell"] && off < 0 {
				off = at
			}
		case at > 12*time.Second && on < 0 && !d["cell"] && d["wifi"]:
			on = at
		}
	}
	// The link died at 7.0 s; with δ ≈ 100 ms the stall shows at the next
	// samples.
	if off < 7*time.Second || off > 7400*time.Millisecond {
		t.Fatalf("cell deactivated at %v, want between 7.0 and 7.4 s", off)
	}
	if on < 12*time.Second || on > 13200*time.Millisecond {
		t.Fatalf("cell preferred again at %v, want soon after it recovered (12.4 s)", on)
	}
}

// A recorded lab run of Table 1 scenario 2 (400 mbit/2 ms + 4 mbit/2 ms)
// under the kernel's default: dynthresh sets the 4 mbit subflow aside. The
// recording has no connection-level counter, so the aggregate is the sum
// of the subflows' measured rates.
func TestDynThreshReplaysTable1Scenario2(t *testing.T) {
	if err := setsAsideTheBadPathMostly(t, paperDynThresh()); err != nil {
		t.Fatal(err)
	}
}

// The check above fails when nothing is decided: it once divided 0 by 0,
// and NaN < 0.6 is false.
func TestReplayCheckFailsWithoutDecisions(t *testing.T) {
	if err := setsAsideTheBadPathMostly(t, decidesNothing{}); err == nil {
		t.Fatal("a policy that decides nothing passed")
	}
}

type decidesNothing struct{}

func (decidesNothing) Name() string                { return "nothing" }
func (decidesNothing) Decide(s *Snapshot) []Action { return nil }
func (decidesNothing) Status() any                 { return nil }

// setsAsideTheBadPathMostly replays Table 1 scenario 2 through p: the
// 400 mbit subflow must never be set aside, and the 4 mbit one must be
// set aside in most samples after 2 s, with short probe windows.
func setsAsideTheBadPathMostly(t *testing.T, p Policy) error {
	snaps, pathOf := replay(t, "testdata/asym2-mptcp.csv")
	asideSamples, total := 0, 0
	t0 := snaps[0].Now
	for _, s := range snaps {
		at := s.Now.Sub(t0)
		for _, x := range p.Decide(s) {
			switch pathOf[x.Subflow.Local.Addr().String()] {
			case "good":
				if x.Backup {
					return fmt.Errorf("at %v the 400 mbit subflow was set aside: %s", at, x.Reason)
				}
			case "bad":
				if at > 2*time.Second {
					total++
					if x.Backup {
						asideSamples++
					}
				}
			}
		}
	}
	if total < 50 {
		return fmt.Errorf("%d decisions on the bad subflow after 2 s, want one per sample (more than 50)", total)
	}
	if frac := float64(asideSamples) / float64(total); frac < 0.6 {
		return fmt.Errorf("bad subflow set aside in %.0f%% of samples after 2 s, want most", frac*100)
	}
	return nil
}
