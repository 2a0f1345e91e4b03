package datapath

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"
	"testing"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/testutil"
)

// ---- packets ----------------------------------------------------------------

type pkt struct {
	v6             bool
	src, dst       string
	sport, dport   uint16
	seq, ack       uint32
	syn, ackf, fin bool
	rst            bool
	window         uint16
	opts           []layers.TCPOption
	payload        []byte
}

var (
	v4a, v4b = "10.1.0.1", "10.1.0.2"
	v6a, v6b = "fd00:1::1", "fd00:1::2"
)

func (p pkt) addrs() (net.IP, net.IP) {
	return net.ParseIP(p.src), net.ParseIP(p.dst)
}

// build serialises Ethernet + IP + TCP with correct lengths and checksums.
func build(t testing.TB, p pkt) []byte {
	t.Helper()
	src, dst := p.addrs()
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(p.sport), DstPort: layers.TCPPort(p.dport), Seq: p.seq, Ack: p.ack,
		SYN: p.syn, ACK: p.ackf, FIN: p.fin, RST: p.rst, Window: p.window, Options: p.opts}
	var ip gopacket.SerializableLayer
	if p.v6 {
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
		eth, ip, tcp, gopacket.Payload(p.payload))
	if err != nil {
		t.Fatal(err)
	}
	return append([]byte(nil), buf.Bytes()...)
}

func opt(kind byte, data ...byte) layers.TCPOption {
	return layers.TCPOption{OptionType: layers.TCPOptionKind(kind), OptionLength: uint8(len(data) + 2), OptionData: data}
}

var (
	nop   = layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1}
	tsOpt = opt(8, 0, 0, 0, 1, 0, 0, 0, 2) // timestamps
	sack  = opt(5, 0, 0, 1, 0, 0, 0, 2, 0) // one SACK block
)

// MPTCP options (RFC 8684).
func mpc(sub byte, rest ...byte) layers.TCPOption {
	return opt(30, append([]byte{sub << 4}, rest...)...)
}

var (
	mpCapable    = mpc(0, 0x81, 1, 2, 3, 4, 5, 6, 7, 8)
	mpJoinSyn    = mpc(1, 2, 0, 0, 0, 1, 0, 0, 0, 2)
	mpJoinSynAck = mpc(1, 2, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 9)
	mpJoinAck    = mpc(1, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20)
	dssAck       = mpc(2, 0x01, 0, 0, 0, 100)                                          // DATA_ACK 4 bytes
	dssData      = mpc(2, 0x05, 0, 0, 0, 100, 0, 0, 0x10, 0, 0, 0, 0, 1, 0, 200, 0, 0) // DATA_ACK + DSN 0x1000 + ssn + len + csum
	addAddr4     = mpc(3, 5, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)                      // id 5, 10.2.0.2, HMAC
	addAddr4Port = mpc(3, 6, 10, 3, 0, 2, 0x1f, 0x90, 1, 2, 3, 4, 5, 6, 7, 8)          // id 6 port 8080
	addAddr6     = mpc(3, 7, 0xfd, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)
	removeAddr   = mpc(4, 5)
	mpPrio       = mpc(5, 0)
	mpFail       = mpc(6, 0, 0, 0, 0, 0, 0, 0, 1)
	fastClose    = mpc(7, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8)
)

// ---- independent checks -----------------------------------------------------

// checksum16 is the Internet checksum, computed here without the kernel
// or gopacket.
func checksum16(chunks ...[]byte) uint16 {
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

// validate checks that a frame is a well-formed TCP packet: IP length,
// IPv4 header checksum, TCP header length and TCP checksum.
func validate(b []byte) error {
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
		if checksum16(ip[:ihl]) != 0 {
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
	if checksum16(pseudo, seg) != 0 {
		return fmt.Errorf("bad TCP checksum")
	}
	return nil
}

// ---- running chains ----------------------------------------------------------

type harness struct {
	t *testing.T
	m *Manager
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	testutil.RequireRoot(t, "loading BPF programs")
	requireChainKernel(t)
	m, err := NewManager()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &harness{t: t, m: m}
}

type run struct {
	ret      int32
	out      []byte
	selected uint64
	modified uint64
	skipped  uint64
	mark     uint32
	priority uint32
}

// chain prepares a chain and returns a function that runs one packet
// through it.
func (h *harness) chain(sel, act string) (uint32, func([]byte) run) {
	h.t.Helper()
	id, _, err := h.m.AddDetached(sel, act)
	if err != nil {
		h.t.Fatalf("chain %q → %q: %v", sel, act, err)
	}
	return id, func(in []byte) run {
		h.t.Helper()
		// The chain's current program: Release may have replaced it.
		prog := h.m.program(id)
		before, _ := h.m.Status(id)
		out := make([]byte, len(in)+64)
		ctxOut := make([]byte, 192)
		opts := &ebpf.RunOptions{Data: in, DataOut: out, Context: make([]byte, 192), ContextOut: ctxOut}
		ret, err := prog.Run(opts)
		if err != nil {
			h.t.Fatalf("test run: %v", err)
		}
		after, _ := h.m.Status(id)
		return run{ret: int32(ret), out: opts.DataOut, selected: after.Selected - before.Selected,
			modified: after.Modified - before.Modified, skipped: after.Skipped - before.Skipped,
			mark: binary.NativeEndian.Uint32(ctxOut[8:]), priority: binary.NativeEndian.Uint32(ctxOut[32:])}
	}
}

const tcxNext, tcxDrop = -1, 2

// variants of option layouts every case is run with.
var layouts = []struct {
	name string
	pre  []layers.TCPOption
}{
	{"bare", nil},
	{"timestamps", []layers.TCPOption{nop, nop, tsOpt}},
	{"timestamps+sack", []layers.TCPOption{nop, nop, tsOpt, nop, nop, sack}},
}

func both(f func(t *testing.T, v6 bool, a, b string)) func(t *testing.T) {
	return func(t *testing.T) {
		t.Run("ipv4", func(t *testing.T) { f(t, false, v4a, v4b) })
		t.Run("ipv6", func(t *testing.T) { f(t, true, v6a, v6b) })
	}
}

func ack(v6 bool, a, b string, opts ...layers.TCPOption) pkt {
	return pkt{v6: v6, src: a, dst: b, sport: 5000, dport: 80, seq: 1000, ack: 2000, ackf: true, window: 512, opts: opts}
}

// ---- selectors -------------------------------------------------------------

func TestSelectors(t *testing.T) {
	h := newHarness(t)
	t.Run("tuple", both(func(t *testing.T, v6 bool, a, b string) {
		ep := func(s string, p int) string { return netip.AddrPortFrom(netip.MustParseAddr(s), uint16(p)).String() }
		_, r := h.chain(fmt.Sprintf("tuple(src=%s, dst=%s)", ep(a, 5000), ep(b, 80)), "count")
		for _, l := range layouts {
			if got := r(build(t, ack(v6, a, b, append(l.pre, dssAck)...))); got.selected != 1 || got.ret != tcxNext {
				t.Errorf("%s: matching packet: %+v", l.name, got)
			}
			p := ack(v6, a, b, l.pre...)
			p.sport = 5001
			if got := r(build(t, p)); got.selected != 0 {
				t.Errorf("%s: other port selected", l.name)
			}
			p = ack(v6, b, a, l.pre...)
			if got := r(build(t, p)); got.selected != 0 {
				t.Errorf("%s: reverse direction selected", l.name)
			}
		}
	}))
	t.Run("pair and prefixes", both(func(t *testing.T, v6 bool, a, b string) {
		pfx := "10.1.0.0/16"
		if v6 {
			pfx = "fd00:1::/32"
		}
		for sel, want := range map[string]uint64{
			fmt.Sprintf("pair(%s, %s)", a, b): 1, fmt.Sprintf("pair(%s, %s)", b, a): 0,
			"src(" + pfx + ")": 1, "dst(" + a + ")": 0, "dst(" + b + ")": 1,
			"not src(" + pfx + ")": 0,
		} {
			_, r := h.chain(sel, "count")
			if got := r(build(t, ack(v6, a, b))); got.selected != want {
				t.Errorf("%s: selected %d, want %d", sel, got.selected, want)
			}
		}
	}))
	t.Run("sequence ranges", both(func(t *testing.T, v6 bool, a, b string) {
		for sel, want := range map[string]uint64{
			"seq(1000, 1001)": 1, "seq(0, 1000)": 0, "seq(4294967000, 2000)": 1, // wraps
			"seq(0, 4294967296)": 1, "seq(1001, 1000)": 0, // every number but 1000
			"dseq(4096, 4097)": 1, "dseq(0, 4096)": 0,
		} {
			_, r := h.chain(sel, "count")
			if got := r(build(t, ack(v6, a, b, nop, nop, tsOpt, dssData))); got.selected != want {
				t.Errorf("%s on a DSS mapping at DSN 4096, seq 1000: selected %d, want %d", sel, got.selected, want)
			}
		}
		_, r := h.chain("dseq(0, 100000)", "count")
		if got := r(build(t, ack(v6, a, b, dssAck))); got.selected != 0 {
			t.Errorf("dseq selected a packet without a mapping")
		}
	}))
	t.Run("packet types", both(func(t *testing.T, v6 bool, a, b string) {
		syn := func(o ...layers.TCPOption) pkt { p := ack(v6, a, b, o...); p.syn, p.ackf = true, false; return p }
		synack := func(o ...layers.TCPOption) pkt { p := ack(v6, a, b, o...); p.syn = true; return p }
		fin := ack(v6, a, b)
		fin.fin = true
		rst := ack(v6, a, b)
		rst.rst, rst.ackf = true, false
		cases := map[string]pkt{
			"mpc-syn": syn(mpCapable), "join-syn": syn(mpJoinSyn), "join-synack": synack(mpJoinSynAck),
			"join-ack": ack(v6, a, b, mpJoinAck), "data": ack(v6, a, b, nop, nop, tsOpt, dssData),
			"data-ack": ack(v6, a, b, nop, nop, tsOpt, dssAck), "add-addr": ack(v6, a, b, addAddr4),
			"remove-addr": ack(v6, a, b, removeAddr), "mp-prio": ack(v6, a, b, mpPrio),
			"mp-fail": ack(v6, a, b, mpFail), "fastclose": ack(v6, a, b, fastClose), "fin": fin, "rst": rst,
		}
		frames := map[string][]byte{}
		for name, p := range cases {
			frames[name] = build(t, p)
		}
		for name := range cases {
			_, r := h.chain("type("+name+")", "count")
			for other, frame := range frames {
				want := uint64(0)
				if other == name {
					want = 1
				}
				if got := r(frame); got.selected != want {
					t.Errorf("type(%s) on a %s packet: selected %d, want %d", name, other, got.selected, want)
				}
			}
		}
		_, r := h.chain("type(mptcp)", "count")
		if got := r(build(t, ack(v6, a, b, nop, nop, tsOpt))); got.selected != 0 {
			t.Error("type(mptcp) selected a plain TCP ACK")
		}
	}))
	t.Run("and, or, not, parentheses", func(t *testing.T) {
		data := build(t, ack(false, v4a, v4b, dssData))
		dack := build(t, ack(false, v4a, v4b, dssAck))
		for sel, want := range map[string][2]uint64{
			"type(data) or type(data-ack)":                            {1, 1},
			"type(data) and src(10.1.0.1)":                            {1, 0},
			"not type(data)":                                          {0, 1},
			"(type(data) or type(add-addr)) and not dst(10.9.0.0/16)": {1, 0},
			"not (type(data) or type(data-ack))":                      {0, 0},
			"src(10.9.0.1) or type(data-ack) && dst(10.1.0.2)":        {0, 1},
		} {
			_, r := h.chain(sel, "count")
			if got := [2]uint64{r(data).selected, r(dack).selected}; got != want {
				t.Errorf("%s: selected (data, data-ack) = %v, want %v", sel, got, want)
			}
		}
	})
}

// ---- actors ----------------------------------------------------------------

func TestSetBackupInsertsMPPrio(t *testing.T) {
	h := newHarness(t)
	_, set := h.chain("type(data-ack) or type(data)", "set_backup(force)")
	_, clr := h.chain("", "clear_backup(force)")
	both(func(t *testing.T, v6 bool, a, b string) {
		for _, l := range layouts {
			for _, payload := range [][]byte{nil, []byte("some payload bytes")} {
				p := ack(v6, a, b, append(append([]layers.TCPOption{}, l.pre...), dssAck)...)
				p.payload = payload
				in := build(t, p)
				want := p
				want.opts = append(append([]layers.TCPOption{}, p.opts...), nop,
					layers.TCPOption{OptionType: 30, OptionLength: 3, OptionData: []byte{0x51}})
				exp := build(t, want)
				got := set(in)
				if got.ret != tcxNext || got.modified != 1 {
					t.Errorf("%s payload=%d: ret %d modified %d", l.name, len(payload), got.ret, got.modified)
				}
				if err := validate(got.out); err != nil {
					t.Errorf("%s payload=%d: output is not valid: %v", l.name, len(payload), err)
				}
				if !bytes.Equal(got.out, exp) {
					t.Errorf("%s payload=%d:\n got %x\nwant %x", l.name, len(payload), got.out, exp)
				}
				// clear_backup writes B=0.
				exp[len(exp)-len(payload)-1] = 0x50
				fixChecksums(t, exp)
				if got := clr(in); !bytes.Equal(got.out, exp) {
					t.Errorf("%s payload=%d: clear_backup\n got %x\nwant %x", l.name, len(payload), got.out, exp)
				}
			}
		}
		// No room: 40 bytes of options already.
		full := ack(v6, a, b, nop, nop, tsOpt, nop, nop, sack, mpc(2, 0x01, 0, 0, 0, 1), nop, nop, nop, nop, nop, nop, nop, nop)
		in := build(t, full)
		if got := set(in); !bytes.Equal(got.out, in) || got.skipped != 1 {
			t.Errorf("full header: skipped %d, changed=%v", got.skipped, !bytes.Equal(got.out, in))
		}
	})(t)
	// Without force, a packet no local subflow owns is left alone.
	_, plain := h.chain("", "set_backup")
	in := build(t, ack(false, v4a, v4b, dssAck))
	if got := plain(in); !bytes.Equal(got.out, in) || got.skipped != 1 {
		t.Errorf("no socket: skipped %d, changed=%v", got.skipped, !bytes.Equal(got.out, in))
	}
}

// fixChecksums recomputes the checksums of a frame built by hand.
func fixChecksums(t testing.TB, b []byte) {
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
	binary.BigEndian.PutUint16(seg[16:], checksum16(pseudo, seg))
}

func TestStripAddAddrAndRelease(t *testing.T) {
	h := newHarness(t)
	both(func(t *testing.T, v6 bool, a, b string) {
		for _, o := range []layers.TCPOption{addAddr4, addAddr4Port, addAddr6} {
			for _, l := range layouts {
				if optLen(l.pre)+int(o.OptionLength) > 40 {
					continue // cannot be sent
				}
				id, r := h.chain("type(add-addr) or type(data-ack)", "strip_add_addr")
				// The kernel's own announcement ACK (no DSS) is dropped.
				p := ack(v6, a, b, append(append([]layers.TCPOption{}, l.pre...), o)...)
				in := build(t, p)
				if got := r(in); got.ret != tcxDrop || got.modified != 1 {
					t.Fatalf("%d-byte ADD_ADDR without DSS, %s: ret %d, modified %d", o.OptionLength, l.name, got.ret, got.modified)
				}
				// Beside a DSS it turns into NOPs.
				withDSS := append(append([]layers.TCPOption{}, l.pre...), dssAck)
				if optLen(withDSS)+int(o.OptionLength) <= 40 {
					p = ack(v6, a, b, append(withDSS, o)...)
					in = build(t, p)
					nops := p
					nops.opts = withDSS
					for i := 0; i < int(o.OptionLength); i++ {
						nops.opts = append(nops.opts, nop)
					}
					exp := build(t, nops)
					got := r(in)
					if err := validate(got.out); err != nil {
						t.Fatalf("%d-byte ADD_ADDR, %s: %v", o.OptionLength, l.name, err)
					}
					if !bytes.Equal(got.out, exp) || got.modified != 1 || got.ret == tcxDrop {
						t.Fatalf("%d-byte ADD_ADDR, %s: modified %d\n got %x\nwant %x", o.OptionLength, l.name, got.modified, got.out, exp)
					}
				}
				st, _ := h.m.Status(id)
				if len(st.Withheld) != 1 || st.Withheld[0].AddrID != uint32(o.OptionData[1]) {
					t.Fatalf("withheld %+v", st.Withheld)
				}
				// Released, it goes back into the next ACK of the subflow
				// that has room, padded with NOPs to a multiple of 4.
				if n, err := h.m.Release(id); n != 1 || err != nil {
					t.Fatalf("release: %d, %v", n, err)
				}
				next := ack(v6, a, b, append(append([]layers.TCPOption{}, l.pre...), dssAck)...)
				padded := (int(o.OptionLength) + 3) &^ 3
				if optLen(next.opts)+padded > 40 {
					crowded := build(t, next)
					if got := r(crowded); !bytes.Equal(got.out, crowded) {
						t.Fatalf("release into a packet without room changed it")
					}
					next = ack(v6, a, b, dssAck)
				}
				want := next
				want.opts = append(append([]layers.TCPOption{}, next.opts...), o)
				for i := int(o.OptionLength); i%4 != 0; i++ {
					want.opts = append(want.opts, nop)
				}
				got := r(build(t, next))
				exp := build(t, want)
				if err := validate(got.out); err != nil {
					t.Fatalf("release, %d-byte ADD_ADDR, %s: %v", o.OptionLength, l.name, err)
				}
				if !bytes.Equal(got.out, exp) {
					t.Fatalf("release, %d-byte ADD_ADDR, %s:\n got %x\nwant %x", o.OptionLength, l.name, got.out, exp)
				}
				// Once out, an ADD_ADDR retransmission passes untouched.
				if got := r(in); !bytes.Equal(got.out, in) {
					t.Fatalf("after release the ADD_ADDR was stripped again")
				}
				h.m.Del(id)
			}
		}
	})(t)
}

func TestDropMarkCountClamp(t *testing.T) {
	h := newHarness(t)
	in := build(t, ack(false, v4a, v4b, dssAck))
	_, drop := h.chain("type(data-ack)", "count drop")
	if got := drop(in); got.ret != tcxDrop {
		t.Errorf("drop: ret %d", got.ret)
	}
	_, mark := h.chain("", "mark(mark=0x2a, classid=1:10)")
	if got := mark(in); got.mark != 0x2a || got.priority != 0x10010 || !bytes.Equal(got.out, in) {
		t.Errorf("mark: mark %#x priority %#x", got.mark, got.priority)
	}
	id, count := h.chain("type(data-ack)", "count")
	for i := 0; i < 3; i++ {
		count(in)
	}
	st, _ := h.m.Status(id)
	if st.Steps[1].Packets != 3 || st.Steps[1].Bytes != 3*uint64(len(in)) {
		t.Errorf("count: %+v", st.Steps)
	}
	// clamp_rwnd needs the local socket's RTT and window scale; a packet
	// nobody owns passes unchanged.
	_, clamp := h.chain("", "clamp_rwnd(64KiB)")
	if got := clamp(in); !bytes.Equal(got.out, in) || got.skipped != 1 {
		t.Errorf("clamp without a socket: skipped %d", got.skipped)
	}
	syn := ack(false, v4a, v4b, mpCapable)
	syn.syn = true
	s := build(t, syn)
	if got := clamp(s); !bytes.Equal(got.out, s) || got.skipped != 0 {
		t.Errorf("clamp touched a SYN")
	}
}

func TestMalformedPacketsPassUnchanged(t *testing.T) {
	h := newHarness(t)
	_, r := h.chain("", "set_backup(force) strip_add_addr count")
	good := build(t, ack(false, v4a, v4b, nop, nop, tsOpt, addAddr4))
	cases := map[string][]byte{
		"truncated TCP header": good[:14+20+15],
		"cut inside options":   good[:14+20+30],
		"IPv4 IHL below 5":     func() []byte { b := append([]byte(nil), good...); b[14] = 0x44; return b }(),
		"data offset 4":        func() []byte { b := append([]byte(nil), good...); b[14+20+12] = 0x40; return b }(),
		"data offset past end": func() []byte { b := append([]byte(nil), good[:14+20+24]...); return b }(),
		"option length 0":      func() []byte { b := append([]byte(nil), good...); b[14+20+20+12+1] = 0; fixChecksums(t, b); return b }(),
		"option past header":   func() []byte { b := append([]byte(nil), good...); b[14+20+20+12+1] = 30; fixChecksums(t, b); return b }(),
		"UDP":                  func() []byte { b := append([]byte(nil), good...); b[14+9] = 17; return b }(),
		"IPv4 fragment":        func() []byte { b := append([]byte(nil), good...); b[14+6] = 0x20; return b }(),
		"not IP":               func() []byte { b := append([]byte(nil), good...); b[12], b[13] = 0x08, 0x06; return b }(),
	}
	for name, in := range cases {
		got := r(in)
		if got.ret != tcxNext && got.ret != tcxDrop {
			t.Errorf("%s: ret %d", name, got.ret)
		}
		if !bytes.Equal(got.out, in) && validate(got.out) != nil {
			t.Errorf("%s: changed into an invalid packet: %v", name, validate(got.out))
		}
	}
}

func optLen(opts []layers.TCPOption) int {
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

// requireChainKernel skips where the kernel cannot run chains: their
// programs read subflows with bpf_rdonly_cast (Linux 6.2) and the manager
// attaches them through TCX only (Linux 6.6) until it falls back to
// clsact.
func requireChainKernel(t testing.TB) {
	t.Helper()
	testutil.RequireFeature(t, kernelfeat.KfuncRdonlyCast)
	testutil.RequireFeature(t, kernelfeat.TCX)
}
