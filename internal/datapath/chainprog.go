package datapath

import (
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"

	"mpsteer/internal/bpfutil"
)

// A chain runs as one BPF program, built when the chain is added or
// replaced: the program's source (bpf/chain.bpf.c, mpsteer_chain) reads
// the chain's steps from read-only globals, which are set here before the
// program is loaded. The verifier sees them as constants: it checks only
// the steps the chain has and drops the code of the others, and the JIT
// turns what is left into straight code with direct branches.

// Step kinds (mirror K_* in bpf/chain.h), by the program names Compile
// gives the built-in steps.
var stepKinds = map[string]uint8{
	"sel_tuple": 1, "sel_prefix": 2, "sel_seq": 3, "sel_type": 4,
	"act_drop": 5, "act_mark": 6, "act_count": 7, "act_clamp_rwnd": 8, "act_set_backup": 9, "act_strip_add_addr": 10,
}

const kindUser = 11

// What a chain needs parsed (mirror NEED_* in bpf/chain.h).
const (
	needAddrs   = 0x1
	needOpts    = 0x2
	needUser    = 0x4
	needRelease = 0x8
)

// resumeIndex is where mpsteer_resume sits in mpsteer_steps: a loaded
// actor's mpsteer_next() jumps there to come back to its chain.
const resumeIndex = 1

// tailCallLimit is the kernel's budget of tail calls per packet.
const tailCallLimit = 33

// chainStep mirrors struct chain_step.
type chainStep struct {
	Kind    uint8
	OnMatch uint8
	OnMiss  uint8
	Flags   uint8
	Prog    uint32
	Args    [80]byte
}

// bakedChain is what the program of one chain is loaded with.
type bakedChain struct {
	steps [MaxSteps]chainStep
	needs uint32
	user  bool
}

// bake turns a compiled chain into the program's constants. The built-in
// steps' arguments are rewritten into the forms the program compares
// with directly (masks, precomputed ranges); loaded actors keep theirs
// (they read them from the descriptor, as before).
func (m *Manager) bake(prog *Program) (*bakedChain, error) {
	b := &bakedChain{}
	calls := 0 // tail calls a packet can take through the chain
	for i, st := range prog.Steps {
		out := &b.steps[i]
		out.OnMatch, out.OnMiss, out.Flags = st.OnMatch, st.OnMiss, st.Flags
		if name, user := strings.CutPrefix(st.Prog, "user:"); user {
			idx, ok := m.index["user:"+name]
			if !ok {
				return nil, fmt.Errorf("step %q: program %s is not loaded", st.Text, st.Prog)
			}
			out.Kind, out.Prog = kindUser, idx
			copy(out.Args[:], st.Args[:])
			b.needs |= needUser | needOpts
			b.user = true
			calls++ // to the actor
			if i+1 < len(prog.Steps) && !strings.HasPrefix(prog.Steps[i+1].Prog, "user:") {
				calls += 2 // back: mpsteer_resume, then the chain
			}
			continue
		}
		kind, ok := stepKinds[st.Prog]
		if !ok {
			return nil, fmt.Errorf("step %q: program %s is not loaded", st.Text, st.Prog)
		}
		out.Kind = kind
		switch st.Prog {
		case "sel_tuple":
			b.needs |= needAddrs
			bakeTuple(&out.Args, st.Args)
		case "sel_prefix":
			b.needs |= needAddrs
			bakePrefix(&out.Args, st.Args)
		case "sel_seq":
			bakeSeq(&out.Args, st.Args)
			if binary.NativeEndian.Uint32(st.Args[0:]) != 0 {
				b.needs |= needOpts // dseq: the DSS option's place
			}
		case "sel_type":
			b.needs |= needOpts
			copy(out.Args[:], st.Args[:])
		case "act_clamp_rwnd", "act_set_backup":
			b.needs |= needAddrs
			copy(out.Args[:], st.Args[:])
		case "act_strip_add_addr":
			b.needs |= needAddrs | needOpts | needRelease
		default:
			copy(out.Args[:], st.Args[:])
		}
	}
	if calls > tailCallLimit {
		return nil, fmt.Errorf("the chain's loaded actors need up to %d tail calls per packet; the kernel allows %d (put loaded actors next to each other, or use fewer)", calls, tailCallLimit)
	}
	return b, nil
}

// match_args: v6 (byte 0), then masks (4..40) and values (40..76) for
// the words src[0..3], dst[0..3], ports (sport, dport), in the packet's
// byte order.
const (
	matchMask = 4
	matchVal  = 40
	wordSrc   = 0
	wordDst   = 4
	wordPorts = 8
)

func matchWord(a *[80]byte, word int, mask, val [4]byte) {
	for j := range 4 {
		a[matchMask+4*word+j] = mask[j]
		a[matchVal+4*word+j] = val[j] & mask[j]
	}
}

// bakeTuple: tuple_args (v6, has_src, has_dst, _, sport, dport, src[16],
// dst[16]) → match_args.
func bakeTuple(a *[80]byte, in [argsLen]byte) {
	v6 := in[0] != 0
	a[0] = in[0]
	words := 1
	if v6 {
		words = 4
	}
	all := [4]byte{0xff, 0xff, 0xff, 0xff}
	for k := range words {
		if in[1] != 0 {
			matchWord(a, wordSrc+k, all, [4]byte(in[8+4*k:12+4*k]))
		}
		if in[2] != 0 {
			matchWord(a, wordDst+k, all, [4]byte(in[24+4*k:28+4*k]))
		}
	}
	var mask, val [4]byte
	if in[4] != 0 || in[5] != 0 { // source port
		mask[0], mask[1], val[0], val[1] = 0xff, 0xff, in[4], in[5]
	}
	if in[6] != 0 || in[7] != 0 { // destination port
		mask[2], mask[3], val[2], val[3] = 0xff, 0xff, in[6], in[7]
	}
	if mask != [4]byte{} {
		matchWord(a, wordPorts, mask, val)
	}
}

// bakePrefix: prefix_args (v6, dst, bits, _, addr[16]) → match_args.
func bakePrefix(a *[80]byte, in [argsLen]byte) {
	a[0] = in[0]
	base, words := wordSrc, 1
	if in[1] != 0 {
		base = wordDst
	}
	if in[0] != 0 {
		words = 4
	}
	bits := int(in[2])
	for k := 0; k < words && bits > 0; k++ {
		take := min(bits, 32)
		var mask [4]byte
		binary.BigEndian.PutUint32(mask[:], ^uint32(0)<<(32-take))
		matchWord(a, base+k, mask, [4]byte(in[4+4*k:8+4*k]))
		bits -= take
	}
}

// bakeSeq: seq_args in (kind, _, lo, hi) → (kind, lo32, lo, hi, span, wide):
// span is the range's size on the 32-bit circle (lo > hi wraps; 2^32 or
// more holds every number), wide = hi - lo for 64-bit DSNs.
func bakeSeq(a *[80]byte, in [argsLen]byte) {
	ne := binary.NativeEndian
	lo, hi := ne.Uint64(in[8:]), ne.Uint64(in[16:])
	span := hi - lo
	if hi < lo {
		span = hi + 1<<32 - lo
	}
	ne.PutUint32(a[0:], ne.Uint32(in[0:]))
	ne.PutUint32(a[4:], uint32(lo))
	ne.PutUint64(a[8:], lo)
	ne.PutUint64(a[16:], hi)
	ne.PutUint64(a[24:], span)
	ne.PutUint64(a[32:], hi-lo)
}

// chainProg is a loaded chain program and its pause switch.
type chainProg struct {
	prog   *ebpf.Program
	paused *ebpf.Variable // nonzero: packets pass untouched
	user   bool           // the chain has loaded actors
}

func (p *chainProg) pause(on bool) error {
	v := uint32(0)
	if on {
		v = 1
	}
	return p.paused.Set(v) // one aligned 4-byte store into the program's .bss
}

// loadChain builds and loads the program of a chain for descriptor slot
// `slot`: the verifier checks the whole chain here. A paused program
// passes packets untouched until it is unpaused.
func (m *Manager) loadChain(id, slot, l2 uint32, prog *Program, paused bool) (*chainProg, error) {
	if m.loadHook != nil {
		m.loadHook()
	}
	b, berr := m.bake(prog)
	if berr != nil {
		return nil, berr
	}
	spec := m.chainSpec.Copy()
	pause := uint32(0)
	if paused {
		pause = 1
	}
	for name, v := range map[string]any{
		"chain_id": id, "chain_slot": slot, "n_steps": uint32(len(prog.Steps)),
		"first_actor": uint32(prog.FirstActor), "l2len": l2, "needs": b.needs, "steps": b.steps, "paused": pause,
		"sock_cache": m.sockCache,
	} {
		if err := spec.Variables[name].Set(v); err != nil {
			return nil, fmt.Errorf("chain program: %s: %w", name, err)
		}
	}
	// The kernel's types (for CO-RE) are decoded once per manager rather
	// than at every load.
	if m.btfCache == nil {
		m.btfCache = btf.NewCache()
	}
	opts := &ebpf.CollectionOptions{MapReplacements: m.sharedMaps(), Cache: m.btfCache}
	// Chains with strip_add_addr are built from mpsteer_chain_release,
	// which also puts back what was released; on a kernel without the
	// kfuncs of 6.2 from the *_no_kfuncs entries (chain.bpf.c). Only the
	// program asked for is loaded.
	p := &chainProg{user: b.user}
	var err error
	p.prog, p.paused, err = loadEntry(spec, b.needs&needRelease != 0, m.noKfuncs, opts)
	if err != nil {
		return nil, fmt.Errorf("load the chain's program: %w", bpfutil.VerifierDetail(err))
	}
	return p, nil
}

// loadEntry loads one of the chain program's entries (and the maps and
// globals it uses).
func loadEntry(spec *ebpf.CollectionSpec, release, noKfuncs bool, opts *ebpf.CollectionOptions) (*ebpf.Program, *ebpf.Variable, error) {
	switch {
	case release && noKfuncs:
		var o struct {
			Prog   *ebpf.Program  `ebpf:"mpsteer_chain_release_no_kfuncs"`
			Paused *ebpf.Variable `ebpf:"paused"`
		}
		err := spec.LoadAndAssign(&o, opts)
		return o.Prog, o.Paused, err
	case release:
		var o struct {
			Prog   *ebpf.Program  `ebpf:"mpsteer_chain_release"`
			Paused *ebpf.Variable `ebpf:"paused"`
		}
		err := spec.LoadAndAssign(&o, opts)
		return o.Prog, o.Paused, err
	case noKfuncs:
		var o struct {
			Prog   *ebpf.Program  `ebpf:"mpsteer_chain_no_kfuncs"`
			Paused *ebpf.Variable `ebpf:"paused"`
		}
		err := spec.LoadAndAssign(&o, opts)
		return o.Prog, o.Paused, err
	}
	var o struct {
		Prog   *ebpf.Program  `ebpf:"mpsteer_chain"`
		Paused *ebpf.Variable `ebpf:"paused"`
	}
	err := spec.LoadAndAssign(&o, opts)
	return o.Prog, o.Paused, err
}
