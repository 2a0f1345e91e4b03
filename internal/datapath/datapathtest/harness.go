package datapathtest

import (
	"encoding/binary"
	"testing"

	"github.com/cilium/ebpf"

	"mpsteer/internal/datapath"
	"mpsteer/internal/testutil"
)

// A chain's verdicts (TCX's, which tc's direct-action filters share).
const (
	TCXNext = -1
	TCXDrop = 2
)

// Harness holds a manager whose chains run packets given to them.
type Harness struct {
	T *testing.T
	M *datapath.Manager
}

// NewHarness loads a manager (as root), closed when the test ends.
func NewHarness(t *testing.T) *Harness {
	t.Helper()
	return NewHarnessWith(t, datapath.Options{})
}

// NewHarnessWith loads a manager with options.
func NewHarnessWith(t *testing.T, o datapath.Options) *Harness {
	t.Helper()
	testutil.RequireRoot(t, "loading BPF programs")
	m, err := datapath.NewManagerWith(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return &Harness{T: t, M: m}
}

// Run is what one packet did in a chain.
type Run struct {
	Ret      int32
	Out      []byte
	Selected uint64
	Modified uint64
	Skipped  uint64
	Mark     uint32
	Priority uint32
}

// Chain prepares a chain (not attached) and returns its id and a function
// that runs one packet through it.
func (h *Harness) Chain(sel, act string) (uint32, func([]byte) Run) {
	h.T.Helper()
	id, _, err := h.M.AddDetached(sel, act)
	if err != nil {
		h.T.Fatalf("chain %q → %q: %v", sel, act, err)
	}
	return id, func(in []byte) Run {
		h.T.Helper()
		// The chain's current program: Replace may have swapped it.
		prog := h.M.Program(id)
		before, _ := h.M.Status(id)
		out := make([]byte, len(in)+64)
		ctxOut := make([]byte, 192)
		opts := &ebpf.RunOptions{Data: in, DataOut: out, Context: make([]byte, 192), ContextOut: ctxOut}
		ret, err := prog.Run(opts)
		if err != nil {
			h.T.Fatalf("test run: %v", err)
		}
		after, _ := h.M.Status(id)
		return Run{Ret: int32(ret), Out: opts.DataOut, Selected: after.Selected - before.Selected,
			Modified: after.Modified - before.Modified, Skipped: after.Skipped - before.Skipped,
			Mark: binary.NativeEndian.Uint32(ctxOut[8:]), Priority: binary.NativeEndian.Uint32(ctxOut[32:])}
	}
}

// Kfuncs runs f with a harness whose chains use the kfuncs of 6.2 (where
// the kernel has them) and with one built as for a kernel without them
// (Debian 12's 6.1), as subtests.
func Kfuncs(t *testing.T, f func(t *testing.T, h *Harness)) {
	t.Run("kfuncs", func(t *testing.T) { f(t, NewHarness(t)) })
	t.Run("without-kfuncs", func(t *testing.T) { f(t, NewHarnessWith(t, datapath.Options{WithoutKfuncs: true})) })
}
