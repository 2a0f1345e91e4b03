package policy

import (
	"encoding/json"
	"net/netip"
	"testing"
)

// A subflow's identity is the same whichever way its addresses came
// (IPv4-mapped IPv6 or IPv4), reads back as it went in, and writes to
// JSON as netip.AddrPort does.
func TestEndpointRoundTrips(t *testing.T) {
	for _, s := range []string{"10.1.0.1:40000", "[2001:db8::1]:443", "[::ffff:10.1.0.1]:40000"} {
		ap := netip.MustParseAddrPort(s)
		e := EndpointOf(ap)
		want := netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
		if e.AddrPort() != want || e.Addr() != want.Addr() || e.Port() != ap.Port() || !e.IsValid() {
			t.Errorf("%s: got %v", s, e)
		}
	}
	if EndpointOf(netip.MustParseAddrPort("[::ffff:10.1.0.1]:1")) != EndpointOf(netip.MustParseAddrPort("10.1.0.1:1")) {
		t.Error("mapped and plain IPv4 differ")
	}
	if (Endpoint{}).IsValid() || (Endpoint{}).Addr().IsValid() {
		t.Error("the zero endpoint is valid")
	}
	id := NewSubflowID(netip.MustParseAddrPort("10.1.0.1:40000"), netip.MustParseAddrPort("[2001:db8::2]:80"))
	b, err := json.Marshal(id)
	if err != nil || string(b) != `{"Local":"10.1.0.1:40000","Remote":"[2001:db8::2]:80"}` {
		t.Fatalf("json %s, %v", b, err)
	}
	var back SubflowID
	if err := json.Unmarshal(b, &back); err != nil || back != id {
		t.Fatalf("read back %v, %v", back, err)
	}
}
