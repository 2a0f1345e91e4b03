package observe

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// ErrNoSocket: no TCP socket has the four-tuple asked for (it closed).
var ErrNoSocket = errors.New("no such socket")

// Lookup reads one TCP socket again, as sampled before (its four-tuple,
// the device it is bound to, its cookie), with the same fields as a
// sample (tcp_info, congestion control, the MPTCP subflow's flags). The
// kernel finds it in its hash table: the cost does not grow with the
// number of sockets, where a sample walks them all. ErrNoSocket when it
// is gone (no socket has the four-tuple, or another one does).
func (s *Sampler) Lookup(sf Subflow) (Subflow, error) {
	msgs, err := s.c.Execute(netlink.Message{
		Header: netlink.Header{Type: unix.SOCK_DIAG_BY_FAMILY, Flags: netlink.Request},
		Data:   lookupRequest(sf, 1<<(inetDiagInfo-1)|1<<(inetDiagCong-1)),
	})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ESTALE) {
		return Subflow{}, ErrNoSocket
	}
	if err != nil {
		return Subflow{}, fmt.Errorf("sock_diag lookup of %s→%s: %w", sf.Local, sf.Remote, err)
	}
	for _, m := range msgs {
		if got, ok := parseSubflow(m.Data); ok {
			return got, nil
		}
	}
	return Subflow{}, ErrNoSocket
}

// lookupRequest is a struct inet_diag_req_v2 naming one socket: the
// socket id (source = local, destination = remote, ports in network
// order, the bound device, the cookie: none to check when unknown).
func lookupRequest(sf Subflow, ext uint8) []byte {
	b := make([]byte, diagReqLen)
	l, r := sf.Local.Addr().Unmap(), sf.Remote.Addr().Unmap()
	b[0] = unix.AF_INET6
	if l.Is4() && r.Is4() {
		b[0] = unix.AF_INET
	}
	b[1] = unix.IPPROTO_TCP
	b[2] = ext
	binary.NativeEndian.PutUint32(b[4:], ^uint32(0)) // every state
	binary.BigEndian.PutUint16(b[8:], sf.Local.Port())
	binary.BigEndian.PutUint16(b[10:], sf.Remote.Port())
	if b[0] == unix.AF_INET {
		a4, b4 := l.As4(), r.As4()
		copy(b[12:16], a4[:])
		copy(b[28:32], b4[:])
	} else {
		a16, b16 := sf.Local.Addr().As16(), sf.Remote.Addr().As16()
		copy(b[12:28], a16[:])
		copy(b[28:44], b16[:])
	}
	binary.NativeEndian.PutUint32(b[44:], sf.Interface)
	cookie := sf.Cookie
	if cookie == 0 {
		cookie = ^uint64(0) // INET_DIAG_NOCOOKIE
	}
	binary.NativeEndian.PutUint32(b[48:], uint32(cookie))
	binary.NativeEndian.PutUint32(b[52:], uint32(cookie>>32))
	return b
}
