package kernelfeat

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/bpfutil"
)

// CoupledBTF says why the kernel's BTF cannot carry the coupled
// congestion controls (internal/sockops/coupled), or returns nil: it must
// load tcp_congestion_ops as BPF struct_ops, describe MPTCP's subflow
// context (the subflows find their connection through it) and offer the
// kfuncs they call. It reads the BTF only: no privileges needed.
func CoupledBTF() error {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return fmt.Errorf("the kernel has no BTF (/sys/kernel/btf/vmlinux): %w", err)
	}
	var st *btf.Struct
	if err := spec.TypeByName("bpf_struct_ops_tcp_congestion_ops", &st); err != nil {
		return errors.New("the kernel does not load tcp_congestion_ops as BPF struct_ops (Linux 5.6 or later with CONFIG_BPF_JIT and CONFIG_BPF_SYSCALL)")
	}
	var ctx *btf.Struct
	if err := spec.TypeByName("mptcp_subflow_context", &ctx); err != nil {
		return errors.New("the kernel's BTF has no struct mptcp_subflow_context (MPTCP built into the kernel, CONFIG_MPTCP=y, is needed)")
	}
	for _, fn := range []string{"tcp_slow_start", "tcp_cong_avoid_ai", "tcp_reno_ssthresh", "tcp_reno_undo_cwnd", "bpf_rdonly_cast"} {
		var f *btf.Func
		if err := spec.TypeByName(fn, &f); err != nil {
			return fmt.Errorf("the kernel offers BPF congestion controls no kfunc %s (Linux 6.2 or later is needed)", fn)
		}
	}
	return nil
}

// probeCoupled checks the BTF the coupled congestion controls need, then
// registers a struct_ops link (which they are).
func probeCoupled(e *probeEnv) error {
	if err := CoupledBTF(); err != nil {
		return err
	}
	return probeStructOpsCC(e)
}

// probeStructOpsCC registers a Reno made of the kernel's kfuncs as a
// struct_ops congestion control under a name of this process (names are
// host-wide), and takes it away again.
func probeStructOpsCC(*probeEnv) error {
	spec, err := loadProbecc()
	if err != nil {
		return err
	}
	ms := spec.Maps["mpsteer_probecc"]
	st, ok := ms.Value.(*btf.Struct)
	if !ok || len(ms.Contents) != 1 {
		return errors.New("the probe's object has no tcp_congestion_ops")
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return errors.New("the probe's tcp_congestion_ops has no value")
	}
	val = slices.Clone(val)
	for _, m := range st.Members {
		if m.Name == "name" {
			off := m.Offset.Bytes()
			clear(val[off : off+16])
			copy(val[off:off+15], fmt.Sprintf("mpsprobe_%d", os.Getpid()))
		}
	}
	ms.Contents[0].Value = val
	var objs probeccObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return fmt.Errorf("load a struct_ops congestion control: %v", bpfutil.VerifierDetail(err))
	}
	defer objs.Close()
	l, err := link.AttachStructOps(link.StructOpsOptions{Map: objs.MpsteerProbecc})
	if err != nil {
		return fmt.Errorf("register a struct_ops congestion control (a struct_ops link): %v", err)
	}
	return l.Close()
}
