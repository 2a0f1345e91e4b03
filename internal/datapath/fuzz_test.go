package datapath

import (
	"bytes"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"github.com/cilium/ebpf"
)

var (
	fuzzOnce sync.Once
	fuzzProg *ebpf.Program
	fuzzErr  error
	fuzzMgr  *Manager
)

// FuzzChain drives random TCP option bytes through a chain whose actors
// rewrite options and lengths; a packet either passes unchanged or leaves
// as a valid packet (lengths and checksums), never broken.
func FuzzChain(f *testing.F) {
	if os.Geteuid() != 0 {
		f.Skip("privileged test: loading BPF programs needs root")
	}
	seeds := [][]byte{
		{},
		{1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2},
		{30, 8, 0x20, 0x01, 0, 0, 0, 1},
		{30, 16, 0x30, 5, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8},
		{30, 3, 0x50},
		{30, 0, 0x30, 5},
		{30, 40, 0x30},
		{2, 4, 5, 0xb4, 30, 18, 0x30, 6, 10, 3, 0, 2, 0x1f, 0x90, 1, 2, 3, 4, 5, 6, 7, 8},
	}
	for _, s := range seeds {
		f.Add(s, false, []byte(nil))
		f.Add(s, true, []byte("payload"))
	}
	f.Fuzz(func(t *testing.T, opts []byte, v6 bool, payload []byte) {
		fuzzOnce.Do(func() {
			fuzzMgr, fuzzErr = NewManager()
			if fuzzErr == nil {
				_, fuzzProg, fuzzErr = fuzzMgr.AddDetached("", "set_backup(force) strip_add_addr clamp_rwnd(64KiB) count")
			}
		})
		if fuzzErr != nil {
			t.Fatal(fuzzErr)
		}
		if len(opts) > 40 {
			opts = opts[:40]
		}
		for len(opts)%4 != 0 {
			opts = append(opts, 0) // EOL padding
		}
		if len(payload) > 1400 {
			payload = payload[:1400]
		}
		a, b := v4a, v4b
		if v6 {
			a, b = v6a, v6b
		}
		p := ack(v6, a, b)
		p.payload = payload
		in := build(t, p)
		in = withRawOptions(t, in, opts)
		out := make([]byte, len(in)+64)
		run := &ebpf.RunOptions{Data: in, DataOut: out}
		ret, err := fuzzProg.Run(run)
		if err != nil {
			t.Fatal(err)
		}
		if r := int32(ret); r != tcxNext && r != tcxDrop {
			t.Fatalf("ret %d", r)
		}
		if int32(ret) == tcxDrop || bytes.Equal(run.DataOut, in) {
			return
		}
		if err := validate(run.DataOut); err != nil {
			t.Fatalf("options %x: the chain changed the packet into an invalid one: %v\n in %x\nout %x", opts, err, in, run.DataOut)
		}
	})
}

// withRawOptions rebuilds a frame with exactly these option bytes (which
// gopacket would normalise), fixing lengths and checksums.
func withRawOptions(t testing.TB, frame, opts []byte) []byte {
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
		c := checksum16(out[l3 : l3+ihl])
		out[l3+10], out[l3+11] = byte(c>>8), byte(c)
	}
	fixChecksums(t, out)
	return out
}

// TestRandomOptionsKeepPacketsValid is the fuzz property over a fixed,
// seeded stream of random option bytes (the coverage-guided FuzzChain
// sees little of what happens inside BPF, so this one is what make test
// relies on).
func TestRandomOptionsKeepPacketsValid(t *testing.T) {
	h := newHarness(t)
	_, prog, err := h.m.AddDetached("", "set_backup(force) strip_add_addr clamp_rwnd(64KiB) count")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	changed := 0
	for i := 0; i < 200000; i++ {
		in, opts, _ := randomOptionsPacket(t, rng)
		out := make([]byte, len(in)+64)
		run := &ebpf.RunOptions{Data: in, DataOut: out}
		ret, err := prog.Run(run)
		if err != nil {
			t.Fatal(err)
		}
		if r := int32(ret); r != tcxNext && r != tcxDrop {
			t.Fatalf("options %x: ret %d", opts, r)
		}
		if int32(ret) == tcxDrop || bytes.Equal(run.DataOut, in) {
			continue
		}
		changed++
		if err := validate(run.DataOut); err != nil {
			t.Fatalf("options %x: changed into an invalid packet: %v\n in %x\nout %x", opts, err, in, run.DataOut)
		}
	}
	t.Logf("200000 packets, %d changed (all valid)", changed)
	if changed == 0 {
		t.Fatal("no packet was changed: the property was never exercised")
	}
}

// randomOptionsPacket is an IPv4 or IPv6 ACK (a third with a payload)
// whose TCP options are random bytes biased towards kinds and lengths
// that parse (MPTCP's kind 30, lengths up to 40), padded to 4 bytes: the
// frame, its options, and whether it is IPv6.
func randomOptionsPacket(t testing.TB, rng *rand.Rand) (pkt, opts []byte, v6 bool) {
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
	a, b := v4a, v4b
	if v6 {
		a, b = v6a, v6b
	}
	p := ack(v6, a, b)
	if rng.IntN(3) == 0 {
		p.payload = make([]byte, rng.IntN(200))
	}
	return withRawOptions(t, build(t, p), opts), opts, v6
}
