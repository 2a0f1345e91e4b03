package observe

import (
	"maps"
	"testing"
)

func TestParseMPTCPCounters(t *testing.T) {
	c, err := ParseMPTCPCounters("TcpExt: SyncookiesSent\nTcpExt: 7\nMPTcpExt: MPCapableSYNRX DSSNotMatching\nMPTcpExt: 3 1\n")
	if err != nil || !maps.Equal(c, MPTCPCounters{"DSSNotMatching": 1, "MPCapableSYNRX": 3}) {
		t.Fatalf("got %v, %v", c, err)
	}
	if c, err := ParseMPTCPCounters("TcpExt: A\nTcpExt: 1\n"); err != nil || len(c) != 0 {
		t.Fatalf("no MPTCP: %v, %v", c, err)
	}
	for _, bad := range []string{"MPTcpExt: A B\nMPTcpExt: 1\n", "MPTcpExt: A\nMPTcpExt: x\n", "MPTcpExt: A\n"} {
		if _, err := ParseMPTCPCounters(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

func TestCountersSince(t *testing.T) {
	got := MPTCPCounters{"A": 5, "B": 2, "C": 1}.Since(MPTCPCounters{"A": 3, "B": 2, "C": 4})
	if want := (MPTCPCounters{"A": 2, "C": 1}); !maps.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}
