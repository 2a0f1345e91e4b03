// Package coupled couples the congestion control of the subflows of each
// MPTCP connection, as the out-of-tree MPTCP kernel did and upstream Linux
// does not (it runs one uncoupled congestion control per subflow, so a
// connection with n subflows through one bottleneck takes about n shares
// from the single-path flows beside it). Two algorithms, each a BPF
// tcp_congestion_ops (struct_ops) in bpf/: LIA (RFC 6356) and BALIA (Peng
// et al., 2016). The subflows of a connection share its state in a map
// keyed by the connection (bpf/coupled.h says how a subflow finds it and
// what each ACK costs); a cgroup sockops program (bpf/select.bpf.c) puts
// MPTCP subflows on the algorithm when they are established, and leaves
// plain TCP sockets on the host's default. model.go computes the same
// windows in Go, for the tests.
package coupled

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/bpfutil"
	"mpsteer/internal/kernelfeat"
)

// Algorithm is a coupled congestion control.
type Algorithm string

const (
	// LIA is RFC 6356's Linked Increases Algorithm.
	LIA Algorithm = "lia"
	// BALIA is the Balanced Linked Adaptation algorithm.
	BALIA Algorithm = "balia"
)

// Algorithms lists the algorithms by name.
var Algorithms = []Algorithm{LIA, BALIA}

// Names lists the algorithms' names.
func Names() []string {
	out := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		out[i] = string(a)
	}
	return out
}

// prefix is the start of the congestion control's registered name (the
// selector program recognises these: bpf/select.bpf.c).
func (a Algorithm) prefix() string {
	switch a {
	case LIA:
		return "mpslia"
	case BALIA:
		return "mpsbal"
	}
	return ""
}

func (a Algorithm) spec() (*ebpf.CollectionSpec, error) {
	switch a {
	case LIA:
		return loadLia()
	case BALIA:
		return loadBalia()
	}
	return nil, fmt.Errorf("unknown coupled congestion control %q (valid: %s)", a, strings.Join(Names(), ", "))
}

// Supported says why this kernel cannot run the coupled congestion
// controls, or returns nil: it must load tcp_congestion_ops as BPF
// struct_ops, offer the kfuncs they call, and describe MPTCP's subflow
// context in its BTF (the subflows find their connection through it).
// It reads the kernel's BTF only: no privileges needed. (kernelfeat
// holds the check: its coupled-cc probe registers a struct_ops link
// after it.)
func Supported() error { return kernelfeat.CoupledBTF() }

// Coupler runs one algorithm: its congestion control registered under a
// name of this process (congestion controls are named host-wide), and the
// selector program attached to the cgroups of the scopes that want it.
type Coupler struct {
	alg  Algorithm
	name string
	cc   *ebpf.Collection
	ops  link.Link
	sel  selectorObjects

	mu    sync.Mutex
	root  string
	links map[string]link.Link // by cgroup path from the hierarchy's root ("/": every connection)
}

// New loads and registers the algorithm's congestion control and loads
// its selector for the network namespace with the given cookie (0: every
// namespace); nothing is attached until Attach.
func New(alg Algorithm, netnsCookie uint64) (*Coupler, error) {
	spec, err := alg.spec()
	if err != nil {
		return nil, err
	}
	c := &Coupler{alg: alg, name: fmt.Sprintf("%s_%d", alg.prefix(), os.Getpid()), links: map[string]link.Link{}}
	opsName := "mpsteer_" + string(alg)
	if err := rename(spec, opsName, c.name); err != nil {
		return nil, err
	}
	if c.cc, err = ebpf.NewCollection(spec); err != nil {
		return nil, fmt.Errorf("load the %s congestion control (struct_ops tcp_congestion_ops): %w", alg, bpfutil.VerifierDetail(err))
	}
	if c.ops, err = link.AttachStructOps(link.StructOpsOptions{Map: c.cc.Maps[opsName]}); err != nil {
		c.cc.Close()
		return nil, fmt.Errorf("register the %s congestion control as %s: %w", alg, c.name, err)
	}
	sel, err := loadSelector()
	if err == nil {
		var name [16]byte
		copy(name[:], c.name)
		err = sel.Variables["cc_name"].Set(name)
	}
	if err == nil {
		err = bpfutil.LoadInNetns(sel, netnsCookie, &c.sel)
	}
	if err != nil {
		c.ops.Close()
		c.cc.Close()
		return nil, fmt.Errorf("load the sockops program that puts subflows on %s: %w", c.name, bpfutil.VerifierDetail(err))
	}
	if c.root, err = bpfutil.Cgroup2Root(); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// rename sets the name a struct_ops tcp_congestion_ops registers under.
func rename(spec *ebpf.CollectionSpec, opsName, name string) error {
	ms := spec.Maps[opsName]
	if ms == nil {
		return fmt.Errorf("the BPF object has no struct_ops %s", opsName)
	}
	st, ok := ms.Value.(*btf.Struct)
	if !ok || len(ms.Contents) != 1 {
		return fmt.Errorf("struct_ops %s is no tcp_congestion_ops", opsName)
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return fmt.Errorf("struct_ops %s has no value", opsName)
	}
	val = slices.Clone(val)
	for _, m := range st.Members {
		if m.Name == "name" {
			off := m.Offset.Bytes()
			clear(val[off : off+16])
			copy(val[off:off+15], name)
		}
	}
	ms.Contents[0].Value = val
	return nil
}

// Algorithm is the algorithm the coupler runs.
func (c *Coupler) Algorithm() Algorithm { return c.alg }

// CongestionControl is the name its congestion control is registered
// under (TCP_CONGESTION, and what ss shows).
func (c *Coupler) CongestionControl() string { return c.name }

// Attach makes the cgroups the selector is attached to those of scopes
// (cgroup v2 paths from the hierarchy's root; "/" for every connection):
// subflows established in them from now on run the algorithm. Subflows
// already established keep their congestion control.
func (c *Coupler) Attach(scopes []string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	want := map[string]bool{}
	for _, s := range scopes {
		want[s] = true
	}
	var errs error
	for s, l := range c.links {
		if !want[s] {
			errs = errors.Join(errs, l.Close())
			delete(c.links, s)
		}
	}
	for s := range want {
		if c.links[s] != nil {
			continue
		}
		dir := filepath.Join(c.root, s)
		l, err := link.AttachCgroup(link.CgroupOptions{Path: dir, Attach: ebpf.AttachCGroupSockOps, Program: c.sel.MpsteerCoupled})
		if err != nil {
			errs = errors.Join(errs, fmt.Errorf("attach the sockops program of %s to %s: %w", c.alg, dir, err))
			continue
		}
		c.links[s] = l
	}
	return errs
}

// Scopes lists the cgroups the selector is attached to.
func (c *Coupler) Scopes() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for s := range c.links {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// Stats counts, from the congestion control: its ACKs in congestion
// avoidance and slow start (acks), the coupled windows it computed
// (recomputed), subflows that joined and left their connection's state,
// sockets that were no MPTCP subflow and subflows beyond the 8 a
// connection couples (both run uncoupled Reno); from the selector: the
// subflows it saw, put on the algorithm, left on a deeper scope's, or
// failed to switch.
func (c *Coupler) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"acks", "recomputed", "joined", "released", "not_mptcp", "no_slot"} {
		var per []uint64
		if err := c.cc.Maps["coupled_stats"].Lookup(uint32(i), &per); err == nil {
			var sum uint64
			for _, v := range per {
				sum += v
			}
			out[name] = sum
		}
	}
	for i, name := range []string{"subflows", "switched", "kept", "failed"} {
		var v uint64
		if err := c.sel.SelectStats.Lookup(uint32(i), &v); err == nil {
			out["selector_"+name] = v
		}
	}
	return out
}

// Slot is one coupled subflow as its connection's state holds it.
type Slot struct {
	CwndPkts uint32
	SRTTus   uint32
}

// Conn is one connection's coupled state: its subflows' last windows and
// RTTs.
type Conn struct {
	Subflows []Slot
}

// Conns reads every connection's coupled state.
func (c *Coupler) Conns() ([]Conn, error) {
	var out []Conn
	var key uint64
	var val liaCoupledConn
	it := c.cc.Maps["coupled_conns"].Iterate()
	for it.Next(&key, &val) {
		var cn Conn
		for _, s := range val.Slot {
			if s.Owner != 0 {
				cn.Subflows = append(cn.Subflows, Slot{CwndPkts: s.Cwnd, SRTTus: s.Rtt})
			}
		}
		out = append(out, cn)
	}
	return out, it.Err()
}

// Close detaches the selector and unregisters the congestion control.
// Subflows still running it keep it until they close (the kernel holds
// it for them), coupled as before.
func (c *Coupler) Close() error {
	errs := errors.Join(c.Attach(nil), c.sel.Close(), c.ops.Close())
	c.cc.Close()
	return errs
}
