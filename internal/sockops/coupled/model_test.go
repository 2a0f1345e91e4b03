package coupled

import (
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
)

// slots makes a connection's slots from windows (packets) and RTTs (µs),
// every one fresh at time 0.
func slots(w []uint32, r []uint32) []ModelSlot {
	out := make([]ModelSlot, MaxSubflows)
	for i := range w {
		out[i] = ModelSlot{Used: true, CwndPkts: w[i], RTTus: r[i]}
	}
	return out
}

// liaRef is RFC 6356 in floating point: per packet acknowledged on
// subflow i, min(alpha/cwnd_total, 1/cwnd_i) packets more, with alpha =
// cwnd_total × max(cwnd/rtt²) / (Σ cwnd/rtt)². Returned as the window
// that gives that increase (its inverse).
func liaRef(w, r []float64, i int) float64 {
	var tot, best, sum float64
	for k := range w {
		tot += w[k]
		best = math.Max(best, w[k]/(r[k]*r[k]))
		sum += w[k] / r[k]
	}
	alpha := tot * best / (sum * sum)
	return 1 / math.Min(alpha/tot, 1/w[i])
}

// baliaRef is BALIA's increase in floating point: x_k = w_k/τ_k, α_r =
// max x / x_r, per ACK x_r / (τ_r (Σx)²) × (1+α_r)/2 × (4+α_r)/5; as the
// window that gives it, and α_r.
func baliaRef(w, r []float64, i int) (float64, float64) {
	var sum, xmax float64
	for k := range w {
		x := w[k] / r[k]
		sum += x
		xmax = math.Max(xmax, x)
	}
	xr := w[i] / r[i]
	a := xmax / xr
	inc := xr / (r[i] * sum * sum) * (1 + a) / 2 * (4 + a) / 5
	return 1 / inc, a
}

func floats(v []uint32) []float64 {
	out := make([]float64, len(v))
	for i, x := range v {
		out[i] = float64(x)
	}
	return out
}

func relErr(got, want float64) float64 { return math.Abs(got-want) / want }

func TestOneSubflowIsReno(t *testing.T) {
	for _, w := range []uint32{1, 2, 10, 1000, 1 << 20} {
		s := slots([]uint32{w}, []uint32{20000})
		if got := LIAWindow(s, 0, 0); got != w {
			t.Errorf("LIA, one subflow of %d packets: window %d, want Reno's %d", w, got, w)
		}
		got, a := BALIAWindow(s, 0, 0)
		if got != w || a != 1<<10 {
			t.Errorf("BALIA, one subflow of %d packets: window %d alpha %d, want Reno's %d, alpha 1024", w, got, a, w)
		}
	}
}

// n subflows alike through one bottleneck together grow by 1/n packet
// per RTT: one packet per n² × cwnd acknowledged on each (RFC 6356 §3:
// alpha = 1/n; BALIA: α = 1, f(1) = 1).
func TestEqualSubflowsGrowAsOneFlow(t *testing.T) {
	for n := 1; n <= MaxSubflows; n++ {
		w, r := make([]uint32, n), make([]uint32, n)
		for i := range w {
			w[i], r[i] = 40, 30000
		}
		want := uint32(n * n * 40)
		if got := LIAWindow(slots(w, r), n-1, 0); got != want {
			t.Errorf("LIA, %d subflows of 40 packets: window %d, want %d", n, got, want)
		}
		if got, _ := BALIAWindow(slots(w, r), n-1, 0); got != want {
			t.Errorf("BALIA, %d subflows of 40 packets: window %d, want %d", n, got, want)
		}
	}
}

// The fixed-point windows follow the formulas within 1% over windows of
// 1 to 100 000 packets and RTTs of 100 µs to 1 s (ratios to 1000).
func TestWindowsFollowTheFormulas(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 20000 {
		n := 1 + rng.IntN(MaxSubflows)
		w, r := make([]uint32, n), make([]uint32, n)
		base := 100 + rng.Uint32N(1000000)
		for i := range w {
			w[i] = 1 + rng.Uint32N(100000)
			r[i] = max(100, min(1000000, base/(1+rng.Uint32N(30))*(1+rng.Uint32N(30))))
		}
		// Keep the RTT ratio within the clamp (1024).
		lo, hi := r[0], r[0]
		for _, x := range r {
			lo, hi = min(lo, x), max(hi, x)
		}
		if hi/lo >= 1000 {
			continue
		}
		i := rng.IntN(n)
		s := slots(w, r)
		want := liaRef(floats(w), floats(r), i)
		if got := float64(LIAWindow(s, i, 0)); relErr(got, want) > 0.01 && math.Abs(got-want) > 1 {
			t.Fatalf("LIA w=%v rtt=%v subflow %d: window %.0f, formula %.1f", w, r, i, got, want)
		}
		wantB, wantA := baliaRef(floats(w), floats(r), i)
		gotW, gotA := BALIAWindow(s, i, 0)
		if wantA > 1024 {
			continue // alpha is clamped at 1024
		}
		if relErr(float64(gotW), wantB) > 0.01 && math.Abs(float64(gotW)-wantB) > 1 {
			t.Fatalf("BALIA w=%v rtt=%v subflow %d: window %d, formula %.1f", w, r, i, gotW, wantB)
		}
		if relErr(float64(gotA)/1024, wantA) > 0.01 {
			t.Fatalf("BALIA w=%v rtt=%v subflow %d: alpha %.3f, formula %.3f", w, r, i, float64(gotA)/1024, wantA)
		}
	}
}

// At the clamps (windows of 2^24 packets, RTT ratios of 1024) nothing
// overflows: the windows stay within 2% of the formulas.
func TestExtremesDoNotOverflow(t *testing.T) {
	cases := []struct{ w, r []uint32 }{
		{[]uint32{1 << 24, 1 << 24, 1 << 24, 1 << 24, 1 << 24, 1 << 24, 1 << 24, 1 << 24}, []uint32{1 << 26, 1 << 26, 1 << 26, 1 << 26, 1 << 26, 1 << 26, 1 << 26, 1 << 26}},
		{[]uint32{1 << 24, 1}, []uint32{65536, 64}},
		{[]uint32{1, 1 << 24}, []uint32{65536, 64}},
		{[]uint32{1 << 24, 1 << 24}, []uint32{1 << 20, 1 << 10}},
		{[]uint32{3, 1 << 23, 17}, []uint32{100, 90000, 1000}},
	}
	for _, c := range cases {
		for i := range c.w {
			s := slots(c.w, c.r)
			want := liaRef(floats(c.w), floats(c.r), i)
			if got := float64(LIAWindow(s, i, 0)); relErr(got, want) > 0.02 && math.Abs(got-want) > 1 {
				t.Errorf("LIA w=%v rtt=%v subflow %d: window %.0f, formula %.1f", c.w, c.r, i, got, want)
			}
			wantB, wantA := baliaRef(floats(c.w), floats(c.r), i)
			gotW, _ := BALIAWindow(s, i, 0)
			if wantA <= 1024 && relErr(float64(gotW), math.Min(wantB, math.MaxUint32)) > 0.02 && math.Abs(float64(gotW)-wantB) > 1 {
				t.Errorf("BALIA w=%v rtt=%v subflow %d: window %d, formula %.1f", c.w, c.r, i, gotW, wantB)
			}
		}
	}
}

// RFC 6356's second goal, do no harm: through one bottleneck (one RTT),
// LIA's subflows together grow by at most one packet per RTT, as one
// Reno flow does (Σ_i cwnd_i / W_i ≤ 1, W_i the window per packet of
// increase).
func TestLIADoesNoHarm(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for range 10000 {
		n := 1 + rng.IntN(MaxSubflows)
		w, r := make([]uint32, n), make([]uint32, n)
		for i := range w {
			w[i], r[i] = 1+rng.Uint32N(5000), 25000
		}
		s := slots(w, r)
		var growth float64
		for i := range w {
			growth += float64(w[i]) / float64(LIAWindow(s, i, 0))
		}
		if growth > 1.001 {
			t.Fatalf("w=%v: the subflows grow by %.3f packets per RTT together, more than one Reno flow", w, growth)
		}
	}
}

// A slot whose subflow has sent nothing for 4 of its RTTs (at least
// 200 ms) no longer counts: the others grow as if it were gone.
func TestStaleSlotsDoNotCount(t *testing.T) {
	s := slots([]uint32{40, 40}, []uint32{30000, 30000})
	s[0].StampUS, s[1].StampUS = 1_000_000, 1_000_000
	if got := LIAWindow(s, 0, 1_100_000); got != 160 {
		t.Errorf("both fresh: window %d, want 160", got)
	}
	if got := LIAWindow(s, 0, 1_300_000); got != 40 {
		t.Errorf("the other silent for 300 ms: window %d, want Reno's 40", got)
	}
	s[1].RTTus = 100000 // 4 RTTs: 400 ms
	if got := LIAWindow(s, 0, 1_300_000); got == 40 {
		t.Errorf("the other silent for 3 of its RTTs still counts: window %d", got)
	}
	s[1].Used = false
	if got, _ := BALIAWindow(s, 0, 1_100_000); got != 40 {
		t.Errorf("a free slot counts: window %d", got)
	}
}

func TestBALIADecrease(t *testing.T) {
	for _, c := range []struct{ cwnd, alpha, want uint32 }{
		{100, 1024, 50},  // α = 1: halved, as Reno
		{100, 1280, 38},  // α = 1.25: 100 − 100 × 1.25 / 2 = 37.5
		{100, 1536, 25},  // α = 1.5: a quarter is left
		{100, 10240, 25}, // α above 1.5 cuts no more
		{3, 1536, 2},     // never below 2 packets
	} {
		if got := BALIADecrease(c.cwnd, c.alpha); got != c.want {
			t.Errorf("cwnd %d alpha %.2f: %d, want %d", c.cwnd, float64(c.alpha)/1024, got, c.want)
		}
	}
}

// muldiv is exact while a × b fits 64 bits; when it does not, the bits
// dropped bound its error: relatively, 2^-(bits of c left) from c's and
// 2^-31 from the factors'.
func TestMulDiv(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for range 100000 {
		a, b := rng.Uint64()>>rng.UintN(64), rng.Uint64()>>rng.UintN(64)
		c := max(rng.Uint64()>>rng.UintN(40), 1)
		exact := new(big.Int).Mul(new(big.Int).SetUint64(a), new(big.Int).SetUint64(b))
		exact.Quo(exact, new(big.Int).SetUint64(c))
		got := muldiv(a, b, c)
		if bits64(a)+bits64(b) <= 64 {
			if !exact.IsUint64() || got != exact.Uint64() {
				t.Fatalf("muldiv(%d, %d, %d) = %d, want %s", a, b, c, got, exact)
			}
			continue
		}
		if !exact.IsUint64() {
			continue // beyond 64 bits: saturating or not, no window is that large
		}
		left := int(bits64(c)) - int(bits64(a)+bits64(b)-64)
		if left < 8 {
			continue // c lost nearly all its bits to the shift
		}
		want, _ := new(big.Float).SetInt(exact).Float64()
		if relErr(float64(got), want) > 2/math.Exp2(float64(left-1))+1/math.Exp2(30) && math.Abs(float64(got)-want) > 1 {
			t.Fatalf("muldiv(%d, %d, %d) = %d, want %.0f", a, b, c, got, want)
		}
	}
	if got := muldiv(1<<63, 1<<63, 1); got != ^uint64(0) {
		t.Errorf("an overflowing quotient is %d, want saturated", got)
	}
}
