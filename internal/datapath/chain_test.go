package datapath_test

import (
	"bytes"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"mpsteer/internal/datapath"
	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/testutil"

	"github.com/cilium/ebpf"
)

// Every built-in selector and actor, as a chain may write them.
var (
	allSelectors = []string{
		"tuple(src=10.1.0.1:5000, dst=10.1.0.2:80)", "tuple(dst=[fd00:1::2]:80)", "pair(10.1.0.1, 10.1.0.2)",
		"pair(fd00:1::1, fd00:1::2)", "src(10.0.0.0/8)", "dst(fd00::/16)", "src(10.1.0.1)", "dst(0.0.0.0/0)",
		"seq(0, 4294967296)", "seq(4294967000, 2000)", "dseq(0, 100000)", "type(data|data-ack)", "type(add-addr)",
	}
	allActors = []string{
		"set_backup", "clear_backup(force)", "strip_add_addr", "clamp_rwnd(64KiB)", "clamp_rwnd(10mbit, egress)",
		"drop", "mark(mark=7, classid=1:10)", "count",
	}
)

// maxStepChains are chains of MaxSteps steps: each selector and each
// actor filling a chain, everything together, and seeded random mixes
// (random and/or/not shapes, random actors).
func maxStepChains() [][2]string {
	var out [][2]string
	for _, s := range allSelectors {
		parts := make([]string, datapath.MaxSteps-1)
		for i := range parts {
			parts[i] = s
		}
		// AND groups of three, ORed: misses and matches jump around
		var groups []string
		for i := 0; i < len(parts); i += 3 {
			groups = append(groups, strings.Join(parts[i:min(i+3, len(parts))], " and "))
		}
		out = append(out, [2]string{strings.Join(groups, " or "), "count"})
	}
	for _, a := range allActors {
		acts := make([]string, datapath.MaxSteps)
		for i := range acts {
			acts[i] = a
		}
		out = append(out, [2]string{"", strings.Join(acts, " ")})
	}
	sel := strings.Join(allSelectors, " and ") + " or not (" + strings.Join(allSelectors[:5], " or ") + ")"
	acts := slices.Clone(allActors)
	for len(acts) < datapath.MaxSteps-len(allSelectors)-5 {
		acts = append(acts, allActors[len(acts)%len(allActors)])
	}
	out = append(out, [2]string{sel, strings.Join(acts, " ")})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		nsel := rng.IntN(datapath.MaxSteps)
		var expr []string
		for i := 0; i < nsel; i++ {
			s := allSelectors[rng.IntN(len(allSelectors))]
			if rng.IntN(4) == 0 {
				s = "not " + s
			}
			if i > 0 {
				expr = append(expr, []string{"and", "or"}[rng.IntN(2)])
			}
			expr = append(expr, s)
		}
		var acts []string
		for len(acts) < datapath.MaxSteps-nsel {
			acts = append(acts, allActors[rng.IntN(len(allActors))])
		}
		out = append(out, [2]string{strings.Join(expr, " "), strings.Join(acts, " ")})
	}
	return out
}

// The verifier accepts chains of MaxSteps steps of every built-in, and
// they run; load times and the verifier's work are logged. Built with the
// kfuncs of 6.2 and without.
func TestMaxStepChainsLoadAndRun(t *testing.T) {
	dt.Kfuncs(t, testMaxStepChains)
}

func testMaxStepChains(t *testing.T, h *dt.Harness) {
	pkts := [][]byte{
		dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSAck)),
		dt.Build(t, dt.ACKPkt(true, dt.V6A, dt.V6B, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSData)),
		dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck, dt.AddAddr4)),
		dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.AddAddr4)),
	}
	var worst time.Duration
	var worstInsns, maxInsns uint32
	var worstChain string
	n := 0
	for _, c := range maxStepChains() {
		prog, err := datapath.Compile(c[0], c[1], nil)
		if err != nil {
			t.Fatalf("%q → %q: %v", c[0], c[1], err)
		}
		if len(prog.Steps) != datapath.MaxSteps {
			t.Fatalf("%q → %q compiled to %d steps, not %d", c[0], c[1], len(prog.Steps), datapath.MaxSteps)
		}
		n++
		t0 := time.Now()
		id, p, err := h.M.AddDetached(c[0], c[1])
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("%d steps, %q → %q: %v", len(prog.Steps), c[0], c[1], err)
		}
		var insns uint32
		if info, err := p.Info(); err == nil {
			insns, _ = info.VerifiedInstructions()
		}
		maxInsns = max(maxInsns, insns)
		if took > worst {
			worst, worstInsns, worstChain = took, insns, c[0]+" → "+c[1]
		}
		for _, in := range pkts {
			out := make([]byte, len(in)+64)
			ret, err := p.Run(&ebpf.RunOptions{Data: in, DataOut: out})
			if err != nil {
				t.Fatal(err)
			}
			if r := int32(ret); r != dt.TCXNext && r != dt.TCXDrop {
				t.Fatalf("%q → %q: ret %d", c[0], c[1], r)
			}
		}
		if err := h.M.Del(id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d chains of %d steps loaded and ran; at most %d instructions verified; slowest load %v (%d instructions verified): %s", n, datapath.MaxSteps, maxInsns, worst, worstInsns, worstChain)
}

// A loaded actor is reached by tail call and comes back to its chain,
// which goes on with the next step; several of them in one chain.
func TestUserActorsComeBackToTheChain(t *testing.T) {
	h := dt.NewHarness(t)
	testutil.RequireTool(t, "clang")
	obj := filepath.Join(t.TempDir(), "stamp.o")
	out, err := exec.Command("clang", "-O2", "-g", "-target", "bpf", "-I", "bpf", "-c", "bpf/template/stamp.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("compile the template: %v\n%s", err, out)
	}
	if err := h.M.LoadActor(obj, "stamp"); err != nil {
		t.Fatal(err)
	}
	id, r := h.Chain("type(data-ack)", "count stamp(0x2a) count stamp(0x2b) mark(classid=1:10) count")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSAck))
	got := r(in)
	if got.Mark != 0x2b || got.Priority != 0x10010 || got.Selected != 1 || got.Modified != 2 {
		t.Fatalf("mark %#x priority %#x selected %d modified %d", got.Mark, got.Priority, got.Selected, got.Modified)
	}
	st, _ := h.M.Status(id)
	for _, i := range []int{1, 3, 6} {
		if st.Steps[i].Packets != 1 {
			t.Fatalf("step %d (%s) counted %d packets, want 1: %+v", i, st.Steps[i].Text, st.Steps[i].Packets, st.Steps)
		}
	}
	// Each loaded actor takes a tail call, and coming back to a built-in
	// step two more: within the kernel's 33 per packet, or refused.
	long := strings.Repeat("stamp(1) count ", 12)
	if _, _, err := h.M.AddDetached("", long); err == nil || !strings.Contains(err.Error(), "tail calls") {
		t.Fatalf("12 loaded actors each followed by a built-in step: %v", err)
	}
	if _, _, err := h.M.AddDetached("", strings.Repeat("stamp(1) ", 20)+"count"); err != nil {
		t.Fatalf("20 loaded actors in a row: %v", err)
	}
	// Replaced, the chain with loaded actors is a new program too.
	if _, err := h.M.Replace(id, "", "stamp(7) count"); err != nil {
		t.Fatal(err)
	}
	if got := r(in); got.Mark != 7 {
		t.Fatalf("after replace: mark %#x", got.Mark)
	}
	st, _ = h.M.Status(id)
	if st.Steps[1].Packets != 1 {
		t.Fatalf("after replace: %+v", st.Steps)
	}
}

// Selectors joined with and, or, not and parentheses select as the
// expression says (the jumps the compiler wires, run by the kernel).
func TestSelectorExpressions(t *testing.T) {
	h := dt.NewHarness(t)
	data := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSData))
	dack := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	for sel, want := range map[string][2]uint64{
		"type(data) or type(data-ack)":                            {1, 1},
		"type(data) and src(10.1.0.1)":                            {1, 0},
		"not type(data)":                                          {0, 1},
		"(type(data) or type(add-addr)) and not dst(10.9.0.0/16)": {1, 0},
		"not (type(data) or type(data-ack))":                      {0, 0},
		"src(10.9.0.1) or type(data-ack) && dst(10.1.0.2)":        {0, 1},
	} {
		_, r := h.Chain(sel, "count")
		if got := [2]uint64{r(data).Selected, r(dack).Selected}; got != want {
			t.Errorf("%s: selected (data, data-ack) = %v, want %v", sel, got, want)
		}
	}
}

// Packets that are not well-formed TCP pass, never changed into invalid
// ones.
func TestMalformedPacketsPassUnchanged(t *testing.T) {
	h := dt.NewHarness(t)
	_, r := h.Chain("", "set_backup(force) strip_add_addr count")
	good := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.Nop, dt.Nop, dt.TSOpt, dt.AddAddr4))
	cases := map[string][]byte{
		"truncated TCP header": good[:14+20+15],
		"cut inside options":   good[:14+20+30],
		"IPv4 IHL below 5":     func() []byte { b := append([]byte(nil), good...); b[14] = 0x44; return b }(),
		"data offset 4":        func() []byte { b := append([]byte(nil), good...); b[14+20+12] = 0x40; return b }(),
		"data offset past end": func() []byte { b := append([]byte(nil), good[:14+20+24]...); return b }(),
		"option length 0": func() []byte {
			b := append([]byte(nil), good...)
			b[14+20+20+12+1] = 0
			dt.FixChecksums(t, b)
			return b
		}(),
		"option past header": func() []byte {
			b := append([]byte(nil), good...)
			b[14+20+20+12+1] = 30
			dt.FixChecksums(t, b)
			return b
		}(),
		"UDP":           func() []byte { b := append([]byte(nil), good...); b[14+9] = 17; return b }(),
		"IPv4 fragment": func() []byte { b := append([]byte(nil), good...); b[14+6] = 0x20; return b }(),
		"not IP":        func() []byte { b := append([]byte(nil), good...); b[12], b[13] = 0x08, 0x06; return b }(),
	}
	for name, in := range cases {
		got := r(in)
		if got.Ret != dt.TCXNext && got.Ret != dt.TCXDrop {
			t.Errorf("%s: ret %d", name, got.Ret)
		}
		if !bytes.Equal(got.Out, in) && dt.Validate(got.Out) != nil {
			t.Errorf("%s: changed into an invalid packet: %v", name, dt.Validate(got.Out))
		}
	}
}
