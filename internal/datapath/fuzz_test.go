package datapath_test

import (
	"bytes"
	"math/rand/v2"
	"os"
	"sync"
	"testing"

	"mpsteer/internal/datapath"
	dt "mpsteer/internal/datapath/datapathtest"

	"github.com/cilium/ebpf"
)

var (
	fuzzOnce sync.Once
	fuzzProg *ebpf.Program
	fuzzErr  error
	fuzzMgr  *datapath.Manager
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
			fuzzMgr, fuzzErr = datapath.NewManager()
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
		a, b := dt.V4A, dt.V4B
		if v6 {
			a, b = dt.V6A, dt.V6B
		}
		p := dt.ACKPkt(v6, a, b)
		p.Payload = payload
		in := dt.Build(t, p)
		in = dt.WithRawOptions(t, in, opts)
		out := make([]byte, len(in)+64)
		run := &ebpf.RunOptions{Data: in, DataOut: out}
		ret, err := fuzzProg.Run(run)
		if err != nil {
			t.Fatal(err)
		}
		if r := int32(ret); r != dt.TCXNext && r != dt.TCXDrop {
			t.Fatalf("ret %d", r)
		}
		if int32(ret) == dt.TCXDrop || bytes.Equal(run.DataOut, in) {
			return
		}
		if err := dt.Validate(run.DataOut); err != nil {
			t.Fatalf("options %x: the chain changed the packet into an invalid one: %v\n in %x\nout %x", opts, err, in, run.DataOut)
		}
	})
}

// TestRandomOptionsKeepPacketsValid is the fuzz property over a fixed,
// seeded stream of random option bytes (the coverage-guided FuzzChain
// sees little of what happens inside BPF, so this one is what make test
// relies on).
func TestRandomOptionsKeepPacketsValid(t *testing.T) {
	h := dt.NewHarness(t)
	_, prog, err := h.M.AddDetached("", "set_backup(force) strip_add_addr clamp_rwnd(64KiB) count")
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	changed := 0
	for i := 0; i < 200000; i++ {
		in, opts, _ := dt.RandomOptionsPacket(t, rng)
		out := make([]byte, len(in)+64)
		run := &ebpf.RunOptions{Data: in, DataOut: out}
		ret, err := prog.Run(run)
		if err != nil {
			t.Fatal(err)
		}
		if r := int32(ret); r != dt.TCXNext && r != dt.TCXDrop {
			t.Fatalf("options %x: ret %d", opts, r)
		}
		if int32(ret) == dt.TCXDrop || bytes.Equal(run.DataOut, in) {
			continue
		}
		changed++
		if err := dt.Validate(run.DataOut); err != nil {
			t.Fatalf("options %x: changed into an invalid packet: %v\n in %x\nout %x", opts, err, in, run.DataOut)
		}
	}
	t.Logf("200000 packets, %d changed (all valid)", changed)
	if changed == 0 {
		t.Fatal("no packet was changed: the property was never exercised")
	}
}
