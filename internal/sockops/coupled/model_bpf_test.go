package coupled

import (
	"math/rand/v2"
	"testing"

	"github.com/cilium/ebpf"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/testutil"
)

// The BPF arithmetic (bpf/window.h, run by bpf/mathtest.bpf.c under
// BPF_PROG_TEST_RUN) computes exactly what model.go does, on random
// connections: windows and RTTs over their whole clamped ranges, free,
// stale and fresh slots, and each subflow in turn.
func TestBPFArithmeticIsTheModels(t *testing.T) {
	testutil.RequireRoot(t, "running BPF programs")
	var objs mathtestObjects
	if err := loadMathtestObjects(&objs, nil); err != nil {
		t.Fatalf("load: %v", bpfutil.VerifierDetail(err))
	}
	defer objs.Close()
	rng := rand.New(rand.NewPCG(7, 8))
	pick := func() uint32 {
		// Mostly realistic values, sometimes anything at all.
		switch rng.IntN(4) {
		case 0:
			return rng.Uint32()
		case 1:
			return rng.Uint32N(64)
		}
		return 1 + rng.Uint32N(100000)
	}
	for i := range 3000 {
		var in mathtestMathtestIn
		slots := make([]ModelSlot, MaxSubflows)
		in.Now = 10_000_000 + rng.Uint64N(1_000_000)
		for k := range slots {
			if rng.IntN(3) == 0 {
				continue
			}
			s := ModelSlot{Used: true, CwndPkts: pick(), RTTus: pick(), StampUS: in.Now - rng.Uint64N(400_000)}
			if rng.IntN(10) == 0 {
				s.StampUS = in.Now + rng.Uint64N(1000) // another CPU's clock a little ahead
			}
			slots[k] = s
			in.Conn.Slot[k].Owner = uint64(k + 1)
			in.Conn.Slot[k].Cwnd, in.Conn.Slot[k].Rtt, in.Conn.Slot[k].Stamp = s.CwndPkts, s.RTTus, s.StampUS
		}
		self := rng.IntN(MaxSubflows)
		if !slots[self].Used {
			// The subflow's own slot is always held (and counts).
			slots[self] = ModelSlot{Used: true, CwndPkts: pick(), RTTus: pick()}
			in.Conn.Slot[self].Owner = 99
			in.Conn.Slot[self].Cwnd, in.Conn.Slot[self].Rtt = slots[self].CwndPkts, slots[self].RTTus
		}
		in.Self = uint32(self)
		in.Cwnd = uint32(clampCwnd(slots[self].CwndPkts))
		in.Alpha = 1024 + rng.Uint32N(2048)
		if err := objs.MathtestInput.Update(uint32(0), &in, ebpf.UpdateAny); err != nil {
			t.Fatal(err)
		}
		if ret, err := objs.Mathtest.Run(&ebpf.RunOptions{}); err != nil || ret != 0 {
			t.Fatalf("run: %d, %v", ret, err)
		}
		var out mathtestMathtestOut
		if err := objs.MathtestOutput.Lookup(uint32(0), &out); err != nil {
			t.Fatal(err)
		}
		lia := LIAWindow(slots, self, in.Now)
		balia, alpha := BALIAWindow(slots, self, in.Now)
		dec := BALIADecrease(slots[self].CwndPkts, in.Alpha)
		if out.Lia != lia || out.Balia != balia || out.BaliaAlpha != alpha || out.BaliaDecrease != dec {
			t.Fatalf("case %d, slots %+v, self %d, now %d: BPF lia %d balia %d alpha %d decrease %d; model %d %d %d %d",
				i, slots, self, in.Now, out.Lia, out.Balia, out.BaliaAlpha, out.BaliaDecrease, lia, balia, alpha, dec)
		}
	}
}
