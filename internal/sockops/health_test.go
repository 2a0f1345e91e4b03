package sockops

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/cilium/ebpf"

	"mpsteer/internal/testutil"
)

// The option's C (bpf/health.h) runs in tc programs here, through
// BPF_PROG_TEST_RUN: sockops programs cannot be run that way. ht_parse
// finds the option the way the kernel's bpf_load_hdr_opt does and parses
// it with the sockops program's parser; ht_write sizes and encodes a
// report for the room a packet's options leave, as the sockops writer
// does on a pure ACK; ht_strip blanks it. Every result is held to the Go
// reference (healthopt.go).

// Walk results of the tc programs (healthtest.bpf.c).
const (
	walkFound     = 0
	walkNone      = 1
	walkNotTCP    = 2
	walkMalformed = 3
)

type htOut struct {
	Walk     int32
	Parsed   int32
	Valid    uint32
	Off      uint32
	Room     uint32
	Fit      int32
	Len      int32
	Stripped uint32
	E        [8]Entry
	Buf      [72]byte
}

func loadTest(t testing.TB) *healthtestObjects {
	t.Helper()
	testutil.RequireRoot(t, "BPF_PROG_TEST_RUN")
	var objs healthtestObjects
	if err := loadHealthtestObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { objs.Close() })
	return &objs
}

// packet builds Ethernet + IPv4 (or IPv6) + TCP with the given options
// (padded with EOL to 4 bytes) and payload, checksums filled in.
func packet(opts []byte, payload int, v6 bool) []byte {
	for len(opts)%4 != 0 {
		opts = append(opts, 0)
	}
	tcp := make([]byte, 20+len(opts)+payload)
	binary.BigEndian.PutUint16(tcp[0:], 5201)
	binary.BigEndian.PutUint16(tcp[2:], 40000)
	binary.BigEndian.PutUint32(tcp[4:], 1000)
	binary.BigEndian.PutUint32(tcp[8:], 2000)
	tcp[12] = byte((20 + len(opts)) / 4 << 4)
	tcp[13] = 0x10 // ACK
	binary.BigEndian.PutUint16(tcp[14:], 512)
	copy(tcp[20:], opts)
	for i := 0; i < payload; i++ {
		tcp[20+len(opts)+i] = byte(i)
	}
	eth := make([]byte, 14)
	var ip []byte
	if !v6 {
		eth[12], eth[13] = 0x08, 0x00
		ip = make([]byte, 20)
		ip[0] = 0x45
		binary.BigEndian.PutUint16(ip[2:], uint16(20+len(tcp)))
		ip[8], ip[9] = 64, 6
		copy(ip[12:], []byte{10, 1, 0, 2})
		copy(ip[16:], []byte{10, 2, 0, 1})
		binary.BigEndian.PutUint16(ip[10:], ^sum16(ip, 0))
		binary.BigEndian.PutUint16(tcp[16:], ^sum16(tcp, pseudo4(ip, len(tcp))))
	} else {
		eth[12], eth[13] = 0x86, 0xdd
		ip = make([]byte, 40)
		ip[0] = 0x60
		binary.BigEndian.PutUint16(ip[4:], uint16(len(tcp)))
		ip[6], ip[7] = 6, 64
		ip[8+15], ip[24+15] = 1, 2
		binary.BigEndian.PutUint16(tcp[16:], ^sum16(tcp, pseudo6(ip, len(tcp))))
	}
	return append(append(eth, ip...), tcp...)
}

func sum16(b []byte, init uint32) uint16 {
	s := init
	for i := 0; i+1 < len(b); i += 2 {
		s += uint32(b[i])<<8 | uint32(b[i+1])
	}
	if len(b)%2 == 1 {
		s += uint32(b[len(b)-1]) << 8
	}
	for s>>16 != 0 {
		s = s&0xffff + s>>16
	}
	return uint16(s)
}

func pseudo4(ip []byte, l int) uint32 {
	return uint32(sum16(append(append(append([]byte{}, ip[12:20]...), 0, 6), byte(l>>8), byte(l)), 0))
}

func pseudo6(ip []byte, l int) uint32 {
	return uint32(sum16(append(append([]byte{}, ip[8:40]...), byte(l>>24), byte(l>>16), byte(l>>8), byte(l), 0, 0, 0, 6), 0))
}

// tcpChecksumOK verifies the TCP checksum of a packet built by packet.
func tcpChecksumOK(p []byte) bool {
	ip := p[14:]
	if ip[0]>>4 == 4 {
		tcp := ip[20:]
		return sum16(tcp, pseudo4(ip, len(tcp))) == 0xffff
	}
	tcp := ip[40:]
	return sum16(tcp, pseudo6(ip, len(tcp))) == 0xffff
}

func run(t testing.TB, prog *ebpf.Program, pkt []byte) []byte {
	t.Helper()
	out := make([]byte, len(pkt)+256)
	ret, err := prog.Run(&ebpf.RunOptions{Data: pkt, DataOut: out})
	if err != nil {
		t.Fatalf("BPF_PROG_TEST_RUN: %v", err)
	}
	if ret != 0 {
		t.Fatalf("the program returned %d, want TC_ACT_OK: it must never drop or redirect", ret)
	}
	return out[:len(pkt)]
}

func result(t testing.TB, o *healthtestObjects) htOut {
	t.Helper()
	var r htOut
	if err := o.HtResult.Lookup(uint32(0), &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// Options MPTCP writes, as the kernel lays them out.
var (
	optTS        = []byte{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2}        // NOP NOP timestamps
	optDSSAck8   = []byte{30, 12, 0x20, 0x03, 0, 0, 0, 0, 0, 0, 1, 0} // DSS, 64-bit data ACK
	optDSSAck4   = []byte{30, 8, 0x20, 0x01, 0, 0, 1, 0}              // DSS, 32-bit data ACK
	optSACK1     = []byte{1, 1, 5, 10, 0, 0, 0x10, 0, 0, 0, 0x20, 0}  // one SACK block
	optSACK2     = []byte{1, 1, 5, 18, 0, 0, 0x10, 0, 0, 0, 0x20, 0, 0, 0, 0x30, 0, 0, 0, 0x40, 0}
	optMPPrio    = []byte{30, 3, 0x51, 1}                                                                                // MP_PRIO (backup) + NOP
	optAddAddr   = []byte{30, 16, 0x12, 2, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8}                                          // ADD_ADDR v4 with HMAC
	optAddEcho   = []byte{30, 8, 0x13, 2, 10, 2, 0, 2}                                                                   // ADD_ADDR echo
	optMPCAck    = []byte{30, 20, 0x01, 0x81, 1, 2, 3, 4, 5, 6, 7, 8, 1, 2, 3, 4, 5, 6, 7, 8}                            // MP_CAPABLE third ACK
	optJoinAck   = append([]byte{30, 24, 0x10, 0}, make([]byte, 20)...)                                                  // MP_JOIN third ACK (HMAC)
	optDSSMap    = []byte{30, 28, 0x20, 0x0f, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0, 1, 5, 0xa8, 0, 0} // data ACK + 64-bit mapping + checksum
	optFastclose = []byte{30, 12, 0x70, 0, 1, 2, 3, 4, 5, 6, 7, 8}
)

func cat(parts ...[]byte) []byte {
	var b []byte
	for _, p := range parts {
		b = append(b, p...)
	}
	return b
}

func entries(n int) []Entry {
	var es []Entry
	for i := 0; i < n; i++ {
		es = append(es, Entry{PeerID: uint8(i), OwnID: uint8(i * 3 % 7), Loss: uint8(10 * i), LastHop: uint8(200 - 5*i)})
	}
	return es
}

// The writer beside every layout MPTCP produces: it takes what room the
// kernel's options leave, as many paths as fit and never more, and
// nothing when not even one fits.
func TestHealthWriterFitsBesideMPTCP(t *testing.T) {
	o := loadTest(t)
	layouts := []struct {
		name string
		opts []byte
		want int // entries of 3 that fit
	}{
		{"dss-ack64", optDSSAck8, 3},
		{"ts+dss-ack64", cat(optTS, optDSSAck8), 3},
		{"ts+dss-ack32", cat(optTS, optDSSAck4), 3},
		{"ts+dss-ack64+sack1", cat(optTS, optDSSAck8, optSACK1), 0},
		{"ts+dss-ack32+sack1", cat(optTS, optDSSAck4, optSACK1), 1},
		{"ts+sack2 (fallback)", cat(optTS, optSACK2), 1},
		{"ts+dss-ack64+mp_prio", cat(optTS, optDSSAck8, optMPPrio), 2},
		{"ts+add_addr", cat(optTS, optAddAddr), 2},
		{"ts+add_addr-echo+dss", cat(optTS, optAddEcho, optDSSAck8), 1},
		{"ts+mp_capable-ack", cat(optTS, optMPCAck), 1},
		{"ts+mp_join-ack", cat(optTS, optJoinAck), 0},
		{"ts+dss-mapping (data)", cat(optTS, optDSSMap), 0},
		{"ts+fastclose", cat(optTS, optFastclose), 3},
		{"none", nil, 3},
	}
	for _, n := range []int{1, 3, 8} {
		for _, l := range layouts {
			t.Run(fmt.Sprintf("%s/%dpaths", l.name, n), func(t *testing.T) {
				es := entries(n)
				var in struct {
					N uint32
					E [8]Entry
				}
				in.N = uint32(n)
				copy(in.E[:], es)
				if err := o.HtInput.Put(uint32(0), &in); err != nil {
					t.Fatal(err)
				}
				pkt := packet(l.opts, 0, false)
				run(t, o.HtWrite, pkt)
				r := result(t, o)
				optlen := (len(l.opts) + 3) &^ 3
				if int(r.Room) != 40-optlen {
					t.Fatalf("room %d, want %d", r.Room, 40-optlen)
				}
				want := FitEntries(40-optlen, n)
				if n == 3 && want != l.want {
					t.Fatalf("reference fit %d, table says %d", want, l.want)
				}
				if int(r.Fit) != want {
					t.Fatalf("fit %d, want %d", r.Fit, want)
				}
				if want == 0 {
					if r.Len != 0 {
						t.Fatalf("no room, but %d bytes encoded", r.Len)
					}
					return
				}
				ref, err := EncodeOption(es[:want])
				if err != nil {
					t.Fatal(err)
				}
				if got := r.Buf[:r.Len]; !bytes.Equal(got, ref) {
					t.Fatalf("encoded % x, want % x", got, ref)
				}
				if optlen+int(r.Len) > 40 {
					t.Fatalf("%d + %d bytes of options: more than TCP has", optlen, r.Len)
				}
				// What was written reads back.
				back, valid, st := ParseOption(r.Buf[:r.Len])
				if st != ParseOK || valid != 1<<want-1 || len(back) != want {
					t.Fatalf("read back: %v %b %v", back, valid, st)
				}
			})
		}
	}
}

// walk is the Go reference of the tc programs' option walk (the kernel's
// bpf_search_tcp_opt): the option of ours and how many of its bytes the
// packet holds.
func walk(opts []byte) (int, []byte, int) {
	i := 0
	for i < len(opts) {
		switch opts[i] {
		case 0:
			return walkNone, nil, 0
		case 1:
			i++
			continue
		}
		if i+1 >= len(opts) {
			return walkMalformed, nil, 0
		}
		l := int(opts[i+1])
		if l < 2 || i+l > len(opts) {
			return walkMalformed, nil, 0
		}
		if opts[i] == OptionKind && l >= 4 && opts[i+2] == OptionExID>>8 && opts[i+3] == OptionExID&0xff {
			return walkFound, opts[i : i+l], i
		}
		i += l
	}
	return walkNone, nil, 0
}

type parseCase struct {
	name string
	opts []byte
	v6   bool
}

func parseCases() []parseCase {
	good := func(n int) []byte { b, _ := EncodeOption(entries(n)); return b }
	bad := good(2)
	bad[2+4] = 201 // first entry's loss out of range
	bad[7+4] = 250 // second entry's last hop too
	short := []byte{OptionKind, 4, 0x52, 0x41}
	odd := []byte{OptionKind, 9, 0x52, 0x41, 1, 2, 3, 4, 5}
	long := append([]byte{OptionKind, 40, 0x52, 0x41}, make([]byte, 36)...)
	claims := append([]byte{OptionKind, 16, 0x52, 0x41}, 1, 2, 3, 4) // says 16, has 8
	other := []byte{OptionKind, 8, 0x12, 0x34, 1, 2, 3, 4}
	kind254 := []byte{254, 8, 0x52, 0x41, 1, 2, 3, 4}
	return []parseCase{
		{"ts+dss+1path", cat(optTS, optDSSAck8, good(1)), false},
		{"ts+dss+3paths", cat(optTS, optDSSAck8, good(3)), false},
		{"dss+6paths", cat(optDSSAck8, good(6)), false},
		{"8paths alone", good(8), false},
		{"ipv6 ts+dss+2paths", cat(optTS, optDSSAck8, good(2)), true},
		{"after sack", cat(optTS, optDSSAck4, optSACK1, good(1)), false},
		{"after mp_prio", cat(optTS, optDSSAck8, optMPPrio, good(2)), false},
		{"values out of range", cat(optTS, optDSSAck8, bad), false},
		{"no entries", cat(optTS, optDSSAck8, short), false},
		{"length not 4+4n", cat(optTS, odd), false},
		{"too long", long, false},
		{"truncated by the header", cat(optTS, optDSSAck8, claims), false},
		{"someone else's ExID", cat(optTS, other), false},
		{"kind 254 with our ExID", cat(optTS, kind254), false},
		{"EOL before it", cat(optDSSAck8, []byte{0, 0, 0, 0}, good(1)), false},
		{"length 0 before it", cat([]byte{30, 0, 1, 1}, good(1)), false},
		{"length 1 before it", cat([]byte{8, 1, 1, 1}, good(1)), false},
		{"option runs past the header", cat(optTS, []byte{8, 30}), false},
		{"unaligned", cat([]byte{1}, good(1), []byte{1, 1, 1}), false},
		{"twice", cat(good(1), good(2)), false},
		{"only NOPs", bytes.Repeat([]byte{1}, 40), false},
		{"no options", nil, false},
		{"mp_join ack, no room for it", cat(optTS, optJoinAck), false},
	}
}

// checkParse runs one packet through ht_parse and holds the result to the
// Go reference; and through ht_strip, whose output must be a valid packet
// without the option.
func checkParse(t testing.TB, o *healthtestObjects, opts []byte, v6 bool) {
	t.Helper()
	padded := append([]byte{}, opts...)
	for len(padded)%4 != 0 {
		padded = append(padded, 0)
	}
	if len(padded) > 40 {
		padded = padded[:40]
	}
	pkt := packet(padded, 100, v6)
	if !bytes.Equal(run(t, o.HtParse, pkt), pkt) {
		t.Fatal("the parser changed the packet")
	}
	r := result(t, o)
	wantWalk, raw, at := walk(padded)
	if int(r.Walk) != wantWalk {
		t.Fatalf("walk %d, want %d", r.Walk, wantWalk)
	}
	if wantWalk == walkFound {
		if int(r.Off) != at {
			t.Fatalf("found at %d, want %d", r.Off, at)
		}
		es, valid, st := ParseOption(raw)
		switch {
		case st != ParseOK:
			if int(r.Parsed) != -int(st) {
				t.Fatalf("parsed %d, want -%d (%s)", r.Parsed, st, st)
			}
		case int(r.Parsed) != len(es) || r.Valid != valid:
			t.Fatalf("parsed %d entries (valid %b), want %d (valid %b)", r.Parsed, r.Valid, len(es), valid)
		default:
			for i, e := range es {
				if r.E[i] != e {
					t.Fatalf("entry %d: %+v, want %+v", i, r.E[i], e)
				}
			}
		}
	}
	out := run(t, o.HtStrip, pkt)
	if !tcpChecksumOK(out) {
		t.Fatalf("stripping broke the TCP checksum:\nin  % x\nout % x", pkt, out)
	}
	ipl := 20
	if v6 {
		ipl = 40
	}
	outOpts := out[14+ipl+20 : 14+ipl+20+len(padded)]
	want := stripRef(padded)
	if !bytes.Equal(outOpts, want) {
		t.Fatalf("stripped options\n% x, want\n% x", outOpts, want)
	}
	if !bytes.Equal(out[:14+ipl+16], pkt[:14+ipl+16]) || !bytes.Equal(out[14+ipl+18:14+ipl+20], pkt[14+ipl+18:14+ipl+20]) ||
		!bytes.Equal(out[14+ipl+20+len(padded):], pkt[14+ipl+20+len(padded):]) {
		t.Fatal("the stripper changed more than the options and the checksum")
	}
}

// stripRef is what ht_strip makes of the options: ours, where they are
// 4-aligned and 4·k long, become NOPs, up to four of them.
func stripRef(opts []byte) []byte {
	out := append([]byte{}, opts...)
	for i := 0; i < 4; i++ {
		w, raw, at := walk(out)
		if w != walkFound || at%4 != 0 || len(raw)%4 != 0 {
			break
		}
		for j := at; j < at+len(raw); j++ {
			out[j] = 1
		}
	}
	return out
}

// The parser on well-formed reports, on every option layout beside them,
// and on what a hostile peer or a broken middlebox may send: never a
// changed packet, never a trusted value out of range, and the same answer
// as the reference.
func TestHealthParserFixtures(t *testing.T) {
	o := loadTest(t)
	for _, c := range parseCases() {
		t.Run(c.name, func(t *testing.T) { checkParse(t, o, c.opts, c.v6) })
	}
	// A packet that is not TCP.
	udp := packet(nil, 10, false)
	udp[14+9] = 17
	run(t, o.HtParse, udp)
	if r := result(t, o); r.Walk != walkNotTCP {
		t.Fatalf("UDP: walk %d", r.Walk)
	}
	// Truncated packets: the header says more than there is.
	full := packet(cat(optTS, optDSSAck8, func() []byte { b, _ := EncodeOption(entries(2)); return b }()), 0, false)
	// (BPF_PROG_TEST_RUN refuses less than an Ethernet and an IPv4 header.)
	for cut := len(full) - 1; cut >= 14+20; cut-- {
		for _, p := range []*ebpf.Program{o.HtParse, o.HtStrip} {
			out := make([]byte, len(full)+256)
			ret, err := p.Run(&ebpf.RunOptions{Data: full[:cut], DataOut: out})
			if err != nil {
				t.Fatalf("%d bytes: %v", cut, err)
			}
			if ret != 0 || !bytes.Equal(out[:cut], full[:cut]) {
				t.Fatalf("%d bytes: returned %d, packet changed: %v", cut, ret, !bytes.Equal(out[:cut], full[:cut]))
			}
		}
	}
}

// Random option bytes: the C and the reference agree, and stripping never
// breaks a packet.
func FuzzHealthParser(f *testing.F) {
	for _, c := range parseCases() {
		f.Add(c.opts, c.v6)
	}
	o := loadTest(f)
	f.Fuzz(func(t *testing.T, opts []byte, v6 bool) {
		checkParse(t, o, opts, v6)
	})
}

// The sockops program passes the verifier of this kernel.
func TestHealthProgramLoads(t *testing.T) {
	testutil.RequireRoot(t, "loading BPF programs")
	var objs healthObjects
	if err := loadHealthObjects(&objs, nil); err != nil {
		t.Fatal(err)
	}
	objs.Close()
}
