package kernelfeat

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/features"
	"github.com/cilium/ebpf/link"
	"github.com/mdlayher/genetlink"
	"github.com/mdlayher/netlink"
	vnl "github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/mptcpize"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
)

// probeEnv is where the probes that attach or connect work: a throwaway
// network namespace, so that nothing of the host's is touched, or, for a
// process that may not make one (the daemon runs with CAP_NET_ADMIN and
// CAP_BPF but not CAP_SYS_ADMIN), its own namespace (ns ""), where they
// add nothing that stays and take nothing that is there.
type probeEnv struct {
	ns     string
	cookie uint64
	lo     int // loopback's index there
}

var envSeq atomic.Int32

func newProbeEnv() (*probeEnv, error) {
	e := &probeEnv{ns: fmt.Sprintf("mpsteer-probe-%d-%d", os.Getpid(), envSeq.Add(1))}
	if err := netnsutil.Create(e.ns); err != nil {
		if !errors.Is(err, unix.EPERM) {
			return nil, fmt.Errorf("make a network namespace to probe in: %w", err)
		}
		e.ns = ""
	}
	err := e.do(func() error {
		lo, err := vnl.LinkByName("lo")
		if err != nil {
			return err
		}
		if err := vnl.LinkSetUp(lo); err != nil {
			return err
		}
		e.lo = lo.Attrs().Index
		e.cookie, err = bpfutil.NetNSCookie()
		return err
	})
	if err != nil {
		e.close()
		return nil, fmt.Errorf("set up the probe's network namespace: %w", err)
	}
	return e, nil
}

func (e *probeEnv) close() {
	if e.ns != "" {
		netnsutil.Delete(e.ns)
	}
}

// do runs fn in the probe's namespace.
func (e *probeEnv) do(fn func() error) error {
	if e.ns == "" {
		return fn()
	}
	return netnsutil.Do(e.ns, fn)
}

// needsPrivilege says why a probe's EPERM may be the process's and not
// the kernel's.
func needsPrivilege(err error) error {
	if errors.Is(err, unix.EPERM) && os.Geteuid() != 0 {
		return fmt.Errorf("%v (not root: run it as root, or with CAP_NET_ADMIN and CAP_BPF)", err)
	}
	return err
}

// needsEnv are the probes that need somewhere to attach or connect.
var needsEnv = map[Name]bool{ListenerEvents: true, TCX: true, Clsact: true, SockopsPacingRate: true, SockopsRTOMax: true}

var probes = map[Name]func(*probeEnv) error{
	MPTCP:             probeMPTCP,
	BTF:               probeBTF,
	PathManagerSysctl: func(*probeEnv) error { return sysctlExists("net.mptcp.path_manager") },
	UserspacePM:       probeUserspacePM,
	ListenerEvents:    probeListenerEvents,
	TCX:               probeTCX,
	Clsact:            probeClsact,
	SockopsHeaderOpts: probeHeaderOpts,
	SockopsPacingRate: func(e *probeEnv) error { return sockoptResult(e, rPacing, "SO_MAX_PACING_RATE") },
	SockopsRTOMax:     func(e *probeEnv) error { return sockoptResult(e, rRTOMax, "TCP_RTO_MAX_MS") },
	StructOpsCC:       probeStructOpsCC,
	BPFTrampolines:    probeTrampolines,
	KfuncRdonlyCast:   probeRdonlyCast,
	UpdateSocketProto: func(*probeEnv) error { return mptcpize.Supported() },
	CoupledCC:         probeCoupled,
}

// fallbackProbes are mechanisms that are no feature of their own in the
// catalogue: they say whether they work and why.
var fallbackProbes = map[Name]func(*Report) (bool, string){
	"pm-type-sysctl": func(*Report) (bool, string) {
		if err := sysctlExists("net.mptcp.pm_type"); err != nil {
			return false, err.Error()
		}
		return true, "net.mptcp.pm_type (0 kernel, 1 userspace; Linux 5.19) is used instead"
	},
	// The datapath's entries without the kfuncs of 6.2 read the subflow's
	// context with bpf_probe_read_kernel instead.
	"probe-read-kernel": func(*Report) (bool, string) {
		if err := features.HaveProgramHelper(ebpf.SchedCLS, asm.FnProbeReadKernel); err != nil {
			return false, fmt.Sprintf("tc programs cannot call bpf_probe_read_kernel either: %v", needsPrivilege(err))
		}
		return true, "the chains are built from their entries that read it with bpf_probe_read_kernel (Linux 5.5)"
	},
}

func sysctlPath(key string) string { return "/proc/sys/" + strings.ReplaceAll(key, ".", "/") }

func sysctlExists(key string) error {
	if _, err := os.Stat(sysctlPath(key)); err != nil {
		return fmt.Errorf("no %s sysctl", key)
	}
	return nil
}

func probeMPTCP(*probeEnv) error {
	b, err := os.ReadFile(sysctlPath("net.mptcp.enabled"))
	if err != nil {
		return errors.New("no net.mptcp.enabled sysctl: the kernel is built without CONFIG_MPTCP")
	}
	if strings.TrimSpace(string(b)) != "1" {
		return errors.New("net.mptcp.enabled is 0 in this network namespace (sysctl -w net.mptcp.enabled=1)")
	}
	return nil
}

func probeBTF(*probeEnv) error {
	if _, err := btf.LoadKernelSpec(); err != nil {
		return fmt.Errorf("no usable kernel BTF (CONFIG_DEBUG_INFO_BTF): %v", err)
	}
	return nil
}

// The generic netlink controller's attributes for a family's operations.
const (
	ctrlAttrOps  = 6 // CTRL_ATTR_OPS
	ctrlAttrOpID = 1 // CTRL_ATTR_OP_ID
)

// probeUserspacePM asks the controller for the mptcp_pm family's commands:
// the userspace path manager's four must be there, and so must the sysctl
// that selects it.
func probeUserspacePM(*probeEnv) error {
	c, err := genetlink.Dial(nil)
	if err != nil {
		return fmt.Errorf("open generic netlink: %v", err)
	}
	defer c.Close()
	ae := netlink.NewAttributeEncoder()
	ae.String(unix.CTRL_ATTR_FAMILY_NAME, pm.FamilyName)
	data, err := ae.Encode()
	if err != nil {
		return err
	}
	msgs, err := c.Execute(genetlink.Message{Header: genetlink.Header{Command: unix.CTRL_CMD_GETFAMILY, Version: 1}, Data: data},
		unix.GENL_ID_CTRL, netlink.Request)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return errors.New("no mptcp_pm generic netlink family")
		}
		return fmt.Errorf("ask for the mptcp_pm family: %v", err)
	}
	var ops []uint32
	for _, m := range msgs {
		ad, err := netlink.NewAttributeDecoder(m.Data)
		if err != nil {
			return err
		}
		for ad.Next() {
			if ad.Type() != ctrlAttrOps {
				continue
			}
			ad.Nested(func(nd *netlink.AttributeDecoder) error {
				for nd.Next() {
					nd.Nested(func(od *netlink.AttributeDecoder) error {
						for od.Next() {
							if od.Type() == ctrlAttrOpID {
								ops = append(ops, od.Uint32())
							}
						}
						return nil
					})
				}
				return nil
			})
		}
		if err := ad.Err(); err != nil {
			return err
		}
	}
	var missing []string
	for id, name := range map[uint32]string{8: "announce", 9: "remove", 10: "subflow-create", 11: "subflow-destroy"} {
		if !slices.Contains(ops, id) {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return fmt.Errorf("the mptcp_pm family has no %s command", strings.Join(missing, ", "))
	}
	if sysctlExists("net.mptcp.path_manager") != nil && sysctlExists("net.mptcp.pm_type") != nil {
		return errors.New("no sysctl selects the userspace path manager (neither net.mptcp.path_manager nor net.mptcp.pm_type)")
	}
	return nil
}

// probeListenerEvents listens on an MPTCP socket in the throwaway
// namespace and waits for the kernel to say so.
func probeListenerEvents(e *probeEnv) error {
	l, err := pm.ListenEvents(pm.Options{NetNSName: e.ns}) // "": this namespace
	if err != nil {
		return err
	}
	defer l.Close()
	var ln net.Listener
	err = e.do(func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
		return err
	})
	if err != nil {
		return fmt.Errorf("listen on MPTCP: %v", err)
	}
	defer ln.Close()
	deadline := time.Now().Add(time.Second)
	l.SetDeadline(deadline)
	for time.Now().Before(deadline) {
		evs, err := l.Receive()
		if err != nil {
			break
		}
		for _, ev := range evs {
			if ev.Type == pm.EventListenerCreated {
				return nil
			}
		}
	}
	return errors.New("an MPTCP listener was opened and no listener_created event came within 1 s")
}

func noopCLS() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}, // TC_ACT_UNSPEC
	})
}

// probeTCX attaches a program that does nothing to the throwaway
// namespace's loopback through TCX.
func probeTCX(e *probeEnv) error {
	prog, err := noopCLS()
	if err != nil {
		return fmt.Errorf("load a TC program: %v", needsPrivilege(err))
	}
	defer prog.Close()
	var l link.Link
	err = e.do(func() error {
		var err error
		l, err = link.AttachTCX(link.TCXOptions{Interface: e.lo, Program: prog, Attach: ebpf.AttachTCXIngress})
		return err
	})
	if err != nil {
		return fmt.Errorf("attach through TCX: %v", err)
	}
	return l.Close()
}

// probeClsact adds a clsact qdisc and a direct-action BPF filter to the
// throwaway namespace's loopback (sch_ingress and cls_bpf, often modules).
func probeClsact(e *probeEnv) error {
	prog, err := noopCLS()
	if err != nil {
		return fmt.Errorf("load a TC program: %v", err)
	}
	defer prog.Close()
	var h *vnl.Handle
	if e.ns == "" {
		h, err = vnl.NewHandle()
	} else {
		h, err = netnsutil.Netlink(e.ns)
	}
	if err != nil {
		return err
	}
	defer h.Close()
	q := &vnl.GenericQdisc{QdiscType: "clsact", QdiscAttrs: vnl.QdiscAttrs{LinkIndex: e.lo, Handle: vnl.MakeHandle(0xffff, 0), Parent: vnl.HANDLE_CLSACT}}
	switch err := h.QdiscAdd(q); {
	case errors.Is(err, unix.EEXIST):
		// Someone's clsact is there (in the process's own namespace): it
		// stays, and so is proof enough of the qdisc.
	case err != nil:
		return fmt.Errorf("add a clsact qdisc (sch_ingress): %v", needsPrivilege(err))
	default:
		defer h.QdiscDel(q)
	}
	// At a priority of its own, taken away again.
	f := &vnl.BpfFilter{
		FilterAttrs:  vnl.FilterAttrs{LinkIndex: e.lo, Parent: vnl.HANDLE_MIN_INGRESS, Handle: 1, Protocol: unix.ETH_P_ALL, Priority: 0xfffe},
		Fd:           prog.FD(),
		Name:         "mpsteer-probe",
		DirectAction: true,
	}
	if err := h.FilterAdd(f); err != nil {
		return fmt.Errorf("add a direct-action BPF filter (cls_bpf): %v", needsPrivilege(err))
	}
	return h.FilterDel(f)
}

func probeHeaderOpts(*probeEnv) error {
	for _, fn := range []asm.BuiltinFunc{asm.FnReserveHdrOpt, asm.FnStoreHdrOpt} {
		if err := features.HaveProgramHelper(ebpf.SockOps, fn); err != nil {
			return fmt.Errorf("sockops programs cannot call %s: %v", fn, err)
		}
	}
	return nil
}

// probeTrampolines loads an fentry program on a function every kernel
// has: the kernel refuses it without the function tracer.
func probeTrampolines(*probeEnv) error {
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{
		Type: ebpf.Tracing, AttachType: ebpf.AttachTraceFEntry, AttachTo: "tcp_connect", License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, 0), asm.Return()},
	})
	if errors.Is(err, unix.EPERM) && os.Geteuid() == 0 {
		return errors.New("the kernel refuses fentry programs even as root: it has no function tracer (CONFIG_FUNCTION_TRACER), or a hypervisor forbids them")
	}
	if err != nil {
		return fmt.Errorf("load an fentry program: %v", err)
	}
	defer prog.Close()
	l, err := link.AttachTracing(link.TracingOptions{Program: prog})
	if err != nil {
		return fmt.Errorf("attach an fentry program (the kernel's function tracer, CONFIG_FUNCTION_TRACER, is needed): %v", err)
	}
	return l.Close()
}

const (
	rRan = iota
	rPacing
	rRTOMax
)

// sockoptResults runs the sockopt probe once per environment.
var sockoptCache = map[*probeEnv][]int64{}

func sockoptResult(e *probeEnv, i int, opt string) error {
	res, ok := sockoptCache[e]
	if !ok {
		var err error
		res, err = runSockoptProbe(e)
		if err != nil {
			return err
		}
		sockoptCache[e] = res
	}
	if res[i] != 0 {
		return fmt.Errorf("a sockops program's bpf_setsockopt(%s) returned %v", opt, unix.Errno(-res[i]))
	}
	return nil
}

// runSockoptProbe attaches the sockopt program, connects over the
// throwaway namespace's loopback and reads what each call returned.
func runSockoptProbe(e *probeEnv) ([]int64, error) {
	spec, err := loadSockopt()
	if err != nil {
		return nil, err
	}
	var objs sockoptObjects
	if err := bpfutil.LoadInNetns(spec, e.cookie, &objs); err != nil {
		return nil, fmt.Errorf("load a sockops program: %v", bpfutil.VerifierDetail(err))
	}
	defer objs.Close()
	l, err := bpfutil.AttachSockOps(objs.MpsteerSockoptProbe, "probe")
	if err != nil {
		return nil, err
	}
	defer l.Close()
	err = e.do(func() error {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		defer ln.Close()
		c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if err != nil {
		return nil, fmt.Errorf("connect over loopback: %v", err)
	}
	out := make([]int64, 3)
	for i := range out {
		if err := objs.Results.Lookup(uint32(i), &out[i]); err != nil {
			return nil, err
		}
	}
	if out[rRan] != 1 {
		return nil, errors.New("the sockops program did not run on a connection made under it")
	}
	return out, nil
}

func probeRdonlyCast(*probeEnv) error {
	var objs rdonlyObjects
	if err := loadRdonlyObjects(&objs, nil); err != nil {
		return fmt.Errorf("load a program that calls bpf_rdonly_cast: %v", bpfutil.VerifierDetail(err))
	}
	return objs.Close()
}
