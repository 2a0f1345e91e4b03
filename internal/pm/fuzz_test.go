package pm

import (
	"testing"

	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
)

// Path-manager events come from the kernel, but a parser must survive any
// bytes: truncated attributes, wrong lengths, addresses of odd sizes.
func FuzzDecodeEvent(f *testing.F) {
	ae := netlink.NewAttributeEncoder()
	ae.Uint32(evToken, 0x1234)
	ae.Uint8(evLocID, 1)
	ae.Bytes(evSaddr4, []byte{10, 1, 0, 1})
	ae.Bytes(evDaddr4, []byte{10, 1, 0, 2})
	ae.Bytes(evSport, []byte{0x9c, 0x40})
	ae.Bytes(evDport, []byte{0x14, 0x51})
	ok, _ := ae.Encode()
	f.Add(uint8(EventSubEstablished), ok)
	f.Add(uint8(EventAnnounced), ok[:9])
	f.Add(uint8(EventClosed), []byte{})
	f.Add(uint8(200), []byte{4, 0, 1, 0})
	f.Fuzz(func(t *testing.T, cmd uint8, data []byte) {
		ev, err := DecodeEvent(genetlink.Message{Header: genetlink.Header{Command: cmd}, Data: data})
		if err == nil && ev.Local.IsValid() && !ev.Local.Addr().IsValid() {
			t.Fatal("a valid address-port with an invalid address")
		}
		decodeAddr(data)
	})
}
