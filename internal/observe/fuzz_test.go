package observe

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// diagMsg builds an inet_diag_msg with attributes, as the kernel sends it.
func diagMsg(family, state uint8, attrs ...[]byte) []byte {
	b := make([]byte, diagMsgLen)
	b[0], b[1] = family, state
	binary.BigEndian.PutUint16(b[4:], 40000)
	binary.BigEndian.PutUint16(b[6:], 5201)
	copy(b[8:], []byte{10, 1, 0, 1})
	copy(b[24:], []byte{10, 1, 0, 2})
	for _, a := range attrs {
		b = append(b, a...)
	}
	return b
}

func attr(typ uint16, payload []byte) []byte {
	n := 4 + len(payload)
	b := make([]byte, (n+3)&^3)
	binary.NativeEndian.PutUint16(b, uint16(n))
	binary.NativeEndian.PutUint16(b[2:], typ)
	copy(b[4:], payload)
	return b
}

// The inet_diag parsers take whatever the kernel (or a corrupted buffer)
// hands them: truncated headers, attributes with lying lengths, nested
// attributes cut short. They must never panic.
func FuzzParseDiag(f *testing.F) {
	info := make([]byte, 232)
	binary.NativeEndian.PutUint32(info[68:], 12345) // some rtt
	mp := attr(ulpInfoMPTCP, append(attr(sfAttrTokenLoc, []byte{1, 2, 3, 4}), attr(sfAttrIDLoc, []byte{3})...))
	ulp := attr(inetDiagULPInfo, append(attr(ulpInfoName, []byte("mptcp\x00")), mp...))
	f.Add(diagMsg(unix.AF_INET, 1, attr(inetDiagInfo, info), ulp))
	f.Add(diagMsg(unix.AF_INET6, 2))
	f.Add(diagMsg(unix.AF_INET, 1, attr(inetDiagInfo, make([]byte, 100))))
	f.Add([]byte{2, 1})
	f.Add(diagMsg(unix.AF_INET, 1, []byte{0xff, 0xff, 19, 0}))
	f.Fuzz(func(t *testing.T, b []byte) {
		if sf, ok := parseSubflow(b); ok && sf.SRTT < 0 {
			t.Fatalf("negative SRTT %v", sf.SRTT)
		}
		parseConn(b)
	})
}

// A connection's token and cgroup read from the mptcp_info of every
// kernel: 48 bytes before 6.5 (Debian 12's 6.1), 96 in 6.18.
func TestParseConnOfEveryKernel(t *testing.T) {
	for _, size := range []int{48, 96} {
		mi := make([]byte, size)
		mi[miSubflows] = 2
		binary.NativeEndian.PutUint32(mi[miToken:], 0x7156baa8)
		cg := make([]byte, 8)
		binary.NativeEndian.PutUint64(cg, 4242)
		c, ok := parseConn(diagMsg(unix.AF_INET, 1, attr(inetDiagInfo, mi), attr(inetDiagCgroupID, cg)))
		if !ok || c.Token != 0x7156baa8 || c.Subflows != 2 || c.CgroupID != 4242 || c.Local.Port() != 40000 || c.Counters != (size == 96) {
			t.Errorf("%d-byte mptcp_info: %+v (ok %v)", size, c, ok)
		}
	}
}
