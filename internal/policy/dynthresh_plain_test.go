package policy

import (
	"strings"
	"testing"
	"time"
)

// The paper's Figs. 17 and 18: two equal paths, a UDP flood on one from
// 3 s to 6 s. Both the plain dynamic threshold and the extended one set
// the flooded subflow aside soon after the flood begins; only the
// extended one, which probes it, takes it back after the flood: the
// plain one never sends on it again.
func TestDynThreshPlainKeepsAFloodedSubflowAsideWhereTheExtendedTakesItBack(t *testing.T) {
	for _, mode := range []string{dtPlain, dtPaper} {
		d := mustBuild(t, "name: dynthresh\nmode: "+mode, Env{}).(*DynThresh)
		s := newSim(t, sf("10.1.0.1", 1, 8*ms, 400), sf("10.2.0.1", 2, 8*ms, 400))
		var aside, back time.Duration = -1, -1
		for i := 0; i < 120; i++ {
			now := time.Duration(i+1) * 100 * ms
			a, b := 380*mbps, 380*mbps
			agg := a + b
			if now >= 3*time.Second && now < 6*time.Second {
				b, agg = 20*mbps, 200*mbps // the flood starves b and stalls the connection
			} else if aside >= 0 && mode == dtPlain {
				b, agg = 0, a // aside for good: b carries nothing
			}
			dec := s.step(d, agg, a, b)
			if dec["10.1.0.1"] {
				t.Fatalf("%s: at %v the unflooded subflow was set aside", mode, now)
			}
			if dec["10.2.0.1"] && aside < 0 {
				aside = now
			}
			if now > 6*time.Second && !dec["10.2.0.1"] && back < 0 {
				back = now - 6*time.Second
			}
		}
		if aside < 3*time.Second || aside > 4*time.Second {
			t.Fatalf("%s: set aside at %v, want soon after the flood began (3 s)", mode, aside)
		}
		switch {
		case mode == dtPlain && back >= 0:
			t.Fatalf("plain: the flooded subflow was used again %v after the flood", back)
		case mode == dtPaper && (back < 0 || back > 2*time.Second):
			t.Fatalf("paper: taken back %v after the flood, want within 2 s", back)
		}
		st := d.Status().([]DynThreshConnStatus)
		if mode == dtPlain && (len(st) != 1 || st[0].Subflows[1].State != "set-aside" || st[0].Subflows[1].SetAside != 1) {
			t.Fatalf("plain: status %+v, want the flooded subflow set aside once, still", st)
		}
	}
}

// A recorded lab run of Table 1 scenario 2 (400 mbit/2 ms + 4 mbit/2 ms):
// the plain rule sets the 4 mbit subflow aside and never gives it a
// probe window; the reason says it is for good.
func TestDynThreshPlainReplaysTable1Scenario2(t *testing.T) {
	snaps, pathOf := replay(t, "testdata/asym2-mptcp.csv")
	d := mustBuild(t, "name: dynthresh\nmode: plain", Env{})
	var asideAt time.Duration = -1
	decided := 0
	t0 := snaps[0].Now
	for _, s := range snaps {
		at := s.Now.Sub(t0)
		for _, x := range d.Decide(s) {
			switch pathOf[x.Subflow.Local.Addr().String()] {
			case "good":
				if x.Backup {
					t.Fatalf("at %v the 400 mbit subflow was set aside: %s", at, x.Reason)
				}
			case "bad":
				decided++
				switch {
				case x.Backup && asideAt < 0:
					asideAt = at
					if !strings.Contains(x.Reason, "for good") {
						t.Fatalf("reason %q, want it to say the subflow is aside for good", x.Reason)
					}
				case !x.Backup && asideAt >= 0:
					t.Fatalf("at %v the bad subflow, set aside at %v, is usable again: %s", at, asideAt, x.Reason)
				}
			}
		}
	}
	if decided == 0 || asideAt < 0 || asideAt > 2*time.Second {
		t.Fatalf("%d decisions on the bad subflow, set aside at %v: want it aside within 2 s", decided, asideAt)
	}
}
