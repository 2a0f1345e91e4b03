package testutil

import "testing"

func TestParseMPTCPCounters(t *testing.T) {
	c, err := parseMPTCPCounters("TcpExt: SyncookiesSent\nTcpExt: 7\nMPTcpExt: MPCapableSYNRX DSSNotMatching\nMPTcpExt: 3 1\n")
	if err != nil || c["DSSNotMatching"] != 1 || c["MPCapableSYNRX"] != 3 || len(c) != 2 {
		t.Fatalf("got %v, %v", c, err)
	}
	if c, err := parseMPTCPCounters("TcpExt: A\nTcpExt: 1\n"); err != nil || len(c) != 0 {
		t.Fatalf("no MPTCP: %v, %v", c, err)
	}
	for _, bad := range []string{"MPTcpExt: A B\nMPTcpExt: 1\n", "MPTcpExt: A\nMPTcpExt: x\n", "MPTcpExt: A\n"} {
		if _, err := parseMPTCPCounters(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
