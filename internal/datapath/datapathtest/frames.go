// Package datapathtest is the fixture library of the chains' tests: TCP
// packets built byte by byte (Ethernet, IPv4 or IPv6, TCP with MPTCP
// options), checks of what a chain made of them that do not rely on the
// kernel or gopacket, and a harness that runs packets through a chain's
// program with BPF_PROG_TEST_RUN. Each selector's and actor's fixture
// test (internal/datapath/bpf/selectors/NAME, bpf/actors/NAME) and the
// chain's own tests use it. Only tests import it.
package datapathtest

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"

	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"
)

// Pkt is a TCP segment to build.
type Pkt struct {
	V6                 bool
	Src, Dst           string
	Sport, Dport       uint16
	Seq, Ack           uint32
	SYN, ACK, FIN, RST bool
	Window             uint16
	Opts               []layers.TCPOption
	Payload            []byte
}

// Addresses the fixtures use.
var (
	V4A, V4B = "10.1.0.1", "10.1.0.2"
	V6A, V6B = "fd00:1::1", "fd00:1::2"
)

// Build serialises Ethernet + IP + TCP with correct lengths and checksums.
func Build(t testing.TB, p Pkt) []byte {
	t.Helper()
	src, dst := net.ParseIP(p.Src), net.ParseIP(p.Dst)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(p.Sport), DstPort: layers.TCPPort(p.Dport), Seq: p.Seq, Ack: p.Ack,
		SYN: p.SYN, ACK: p.ACK, FIN: p.FIN, RST: p.RST, Window: p.Window, Options: p.Opts}
	var ip gopacket.SerializableLayer
	if p.V6 {
		eth.EthernetType = layers.EthernetTypeIPv6
		ip6 := &layers.IPv6{Version: 6, NextHeader: layers.IPProtocolTCP, HopLimit: 64, SrcIP: src, DstIP: dst}
		tcp.SetNetworkLayerForChecksum(ip6)
		ip = ip6
	} else {
		eth.EthernetType = layers.EthernetTypeIPv4
		ip4 := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: src.To4(), DstIP: dst.To4()}
		tcp.SetNetworkLayerForChecksum(ip4)
		ip = ip4
	}
	buf := gopacket.NewSerializeBuffer()
	err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true},
		eth, ip, tcp, gopacket.Payload(p.Payload))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

// Opt is a TCP option of the given kind and data.
func Opt(kind byte, data ...byte) layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKind(kind), OptionLength: uint8(len(data) + 2), OptionData: data}
}

// Options every test uses.
var (
	Nop   = layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1}
	TSOpt = Opt(8, 0, 0, 0, 1, 0, 0, 0, 2) // timestamps
	SACK  = Opt(5, 0, 0, 1, 0, 0, 0, 2, 0) // one SACK block
)

// MPTCP is an MPTCP option (RFC 8684) of subtype sub.
func MPTCP(sub byte, rest ...byte) layers.TCPOption {
	return Opt(30, append([]byte{sub << 4}, rest...)...)
}

// MPTCP options.
var (
	MPCapable    = MPTCP(0, 0x81, 1, 2, 3, 4, 5, 6, 7, 8)
	MPJoinSyn    = MPTCP(1, 2, 0, 0, 0, 1, 0, 0, 0, 2)
	MPJoinSynAck = MPTCP(1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9)
	MPJoinAck    = MPTCP(1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	DSSAck       = MPTCP(2, 0x01, 0, 0, 0, 100)                                          // DATA_ACK 4 bytes
	DSSData      = MPTCP(2, 0x05, 0, 0, 0, 100, 0, 0, 0x10, 0, 0, 0, 0, 1, 0, 200, 0, 0) // DATA_ACK + DSN 0x1000 + ssn + len + csum
	AddAddr4     = MPTCP(3, 5, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)                      // id 5, 10.2.0.2, HMAC
	AddAddr4Port = MPTCP(3, 6, 10, 3, 0, 2, 0x1f, 0x90, 1, 2, 3, 4, 5, 6, 7, 8)          // id 6 port 8080
	AddAddr6     = MPTCP(3, 7, 0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)
	RemoveAddr   = MPTCP(4, 5)
	MPPrio       = MPTCP(5, 0)
	MPFail       = MPTCP(6, 0, 0, 0, 0, 0, 0, 0, 1)
	FastClose    = MPTCP(7, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)
)

// AddAddr4ID is an IPv4 ADD_ADDR (address 10.2.0.2, an HMAC) with the
// given address id.
func AddAddr4ID(id byte) layers.TCPOption {
	return MPTCP(3, id, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)
}

// ACKPkt is an ACK from a:5000 to b:80 carrying opts.
func ACKPkt(v6 bool, a, b string, opts ...layers.TCPOption) Pkt {
	return Pkt{V6: v6, Src: a, Dst: b, Sport: 5000, Dport: 80, Seq: 1000, Ack: 2000, ACK: true, Window: 512, Opts: opts}
}

// Layouts are the option layouts in front of the option under test that
// every case is run with.
var Layouts = []struct {
	Name string
	Pre  []layers.TCPOption
}{
	{"bare", nil},
	{"timestamps", []layers.TCPOption{Nop, Nop, TSOpt}},
	{"timestamps+sack", []layers.TCPOption{Nop, Nop, TSOpt, Nop, Nop, SACK}},
}

// Both runs f for IPv4 and for IPv6, with the addresses of each.
func Both(f func(t *testing.T, v6 bool, a, b string)) func(t *testing.T) {
	return func(t *testing.T) {
		t.Run("ipv4", func(t *testing.T) { f(t, false, V4A, V4B) })
		t.Run("ipv6", func(t *testing.T) { f(t, true, V6A, V6B) })
	}
}

// OptLen is the bytes the options take.
func OptLen(opts []layers.TCPOption) int {
	n := 0
	for _, o := range opts {
		if o.OptionType == layers.TCPOptionKindNop {
			n++
		} else {
			n += int(o.OptionLength)
		}
	}
	return n
}

// ---- independent checks -----------------------------------------------------

// Checksum16 is the Internet checksum, computed here without the kernel
// or gopacket.
func Checksum16(chunks ...[]byte) uint16 {
	var sum uint32
	var all []byte
	for _, c := range chunks {
		all = append(all, c...)
	}
	for i := 0; i+1 < len(all); i += 2 {
		sum += uint32(all[i])<<8 | uint32(all[i+1])
	}
	if len(all)%2 == 1 {
		sum += uint32(all[len(all)-1]) << 8
	}
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// Validate checks that a frame is a well-formed TCP packet: IP length,
// IPv4 header checksum, TCP header length and TCP checksum.
func Validate(b []byte) error {
	if len(b) < 14 {
		return fmt.Errorf("%d bytes: no Ethernet header", len(b))
	}
	et := binary.BigEndian.Uint16(b[12:])
	ip := b[14:]
	var seg, pseudo []byte
	switch et {
	case 0x0800:
		if len(ip) < 20 {
			return fmt.Errorf("short IPv4 header")
		}
		ihl := int(ip[0]&0xf) * 4
		tot := int(binary.BigEndian.Uint16(ip[2:]))
		if tot != len(ip) {
			return fmt.Errorf("IPv4 total length %d, packet has %d", tot, len(ip))
		}
		if Checksum16(ip[:ihl]) != 0 {
			return fmt.Errorf("bad IPv4 header checksum")
		}
		seg = ip[ihl:tot]
		pseudo = append(append(append([]byte{}, ip[12:20]...), 0, 6), byte(len(seg)>>8), byte(len(seg)))
	case 0x86dd:
		if len(ip) < 40 {
			return fmt.Errorf("short IPv6 header")
		}
		pl := int(binary.BigEndian.Uint16(ip[4:]))
		if pl != len(ip)-40 {
			return fmt.Errorf("IPv6 payload length %d, packet has %d", pl, len(ip)-40)
		}
		seg = ip[40:]
		l := make([]byte, 4)
		binary.BigEndian.PutUint32(l, uint32(len(seg)))
		pseudo = append(append(append([]byte{}, ip[8:40]...), l...), 0, 0, 0, 6)
	default:
		return fmt.Errorf("ethertype %#x", et)
	}
	if len(seg) < 20 {
		return fmt.Errorf("a %d-byte TCP segment", len(seg))
	}
	if int(seg[12]>>4)*4 > len(seg) || seg[12]>>4 < 5 {
		return fmt.Errorf("TCP header length %d for a %d-byte segment", int(seg[12]>>4)*4, len(seg))
	}
	if Checksum16(pseudo, seg) != 0 {
		return fmt.Errorf("bad TCP checksum")
	}
	return nil
}

// FixChecksums recomputes the TCP checksum of a frame built by hand.
func FixChecksums(t testing.TB, b []byte) {
	t.Helper()
	ip := b[14:]
	var seg, pseudo []byte
	if binary.BigEndian.Uint16(b[12:]) == 0x0800 {
		ihl := int(ip[0]&0xf) * 4
		seg = ip[ihl:]
		pseudo = append(append(append([]byte{}, ip[12:20]...), 0, 6), byte(len(seg)>>8), byte(len(seg)))
	} else {
		seg = ip[40:]
		l := make([]byte, 4)
		binary.BigEndian.PutUint32(l, uint32(len(seg)))
		pseudo = append(append(append([]byte{}, ip[8:40]...), l...), 0, 0, 0, 6)
	}
	seg[16], seg[17] = 0, 0
	binary.BigEndian.PutUint16(seg[16:], Checksum16(pseudo, seg))
}

// WithRawOptions rebuilds a frame with exactly these option bytes (which
// gopacket would normalise), fixing lengths and checksums.
func WithRawOptions(t testing.TB, frame, opts []byte) []byte {
	t.Helper()
	v6 := frame[12] == 0x86
	l3 := 14
	ihl := 20
	if !v6 {
		ihl = int(frame[l3]&0xf) * 4
	} else {
		ihl = 40
	}
	l4 := l3 + ihl
	thlen := int(frame[l4+12]>>4) * 4
	payload := frame[l4+thlen:]
	var out []byte
	out = append(out, frame[:l4+20]...)
	out = append(out, opts...)
	out = append(out, payload...)
	out[l4+12] = byte((20+len(opts))/4) << 4
	total := len(out) - l3
	if v6 {
		out[l3+4], out[l3+5] = byte((total-40)>>8), byte(total-40)
	} else {
		out[l3+2], out[l3+3] = byte(total>>8), byte(total)
		out[l3+10], out[l3+11] = 0, 0
		c := Checksum16(out[l3 : l3+ihl])
		out[l3+10], out[l3+11] = byte(c>>8), byte(c)
	}
	FixChecksums(t, out)
	return out
}

// RandomOptionsPacket is an IPv4 or IPv6 ACK (a third with a payload)
// whose TCP options are random bytes biased towards kinds and lengths
// that parse (MPTCP's kind 30, lengths up to 40), padded to 4 bytes: the
// frame, its options, and whether it is IPv6.
func RandomOptionsPacket(t testing.TB, rng *rand.Rand) (pkt, opts []byte, v6 bool) {
	opts = make([]byte, rng.IntN(41))
	for j := range opts {
		switch rng.IntN(4) {
		case 0:
			opts[j] = 30
		case 1:
			opts[j] = byte(rng.IntN(41))
		default:
			opts[j] = byte(rng.Uint32())
		}
	}
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	v6 = rng.IntN(2) == 0
	a, b := V4A, V4B
	if v6 {
		a, b = V6A, V6B
	}
	p := ACKPkt(v6, a, b)
	if rng.IntN(3) == 0 {
		p.Payload = make([]byte, rng.IntN(200))
	}
	return WithRawOptions(t, Build(t, p), opts), opts, v6
}
