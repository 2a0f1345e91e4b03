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
