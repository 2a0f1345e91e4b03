package sockops

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/bpfutil"
)

// InitialBinder keeps MPTCP connections from opening their initial subflow
// on a volatile path (prefer's avoid_initial): a cgroup connect4 program
// binds the first subflow of every MPTCP socket that is not bound yet to a
// chosen local address, whose path it then takes. Plain TCP, sockets the
// application bound, joins and loopback destinations are left alone; IPv6
// connections are not touched.
type InitialBinder struct {
	mu   sync.Mutex
	objs initialObjects
	link link.Link
	addr netip.Addr
}

// NewInitialBinder loads and attaches the program for the network
// namespace with the given cookie (0 = every namespace); it binds nothing
// until Set names an address.
func NewInitialBinder(netnsCookie uint64) (*InitialBinder, error) {
	spec, err := loadInitial()
	if err != nil {
		return nil, err
	}
	b := &InitialBinder{}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &b.objs); err != nil {
		return nil, fmt.Errorf("load the connect4 program of avoid_initial: %w", bpfutil.VerifierDetail(err))
	}
	root, err := bpfutil.Cgroup2Root()
	if err != nil {
		b.objs.Close()
		return nil, err
	}
	b.link, err = link.AttachCgroup(link.CgroupOptions{Path: root, Attach: ebpf.AttachCGroupInet4Connect, Program: b.objs.MpsteerInitial})
	if err != nil {
		b.objs.Close()
		return nil, fmt.Errorf("attach the connect4 program of avoid_initial to %s: %w", root, err)
	}
	return b, nil
}

// Set names the IPv4 address initial subflows are bound to (invalid:
// none; connections then start where routing sends them).
func (b *InitialBinder) Set(a netip.Addr) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if a == b.addr {
		return nil
	}
	if a.IsValid() && !a.Is4() {
		return fmt.Errorf("%s: initial subflows are bound to IPv4 addresses only", a)
	}
	var v uint32
	if a.IsValid() {
		b4 := a.As4()
		v = nativeFromBytes(b4[:])
	}
	if err := b.objs.InitialAddr.Put(uint32(0), v); err != nil {
		return err
	}
	b.addr = a
	return nil
}

// Addr is the address initial subflows are bound to now.
func (b *InitialBinder) Addr() netip.Addr {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.addr
}

// Stats counts connects seen, MPTCP connects, initial subflows bound and
// binds that failed.
func (b *InitialBinder) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"connects", "mptcp_connects", "bound", "failed"} {
		var v uint64
		if err := b.objs.InitialStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// Close detaches and unloads.
func (b *InitialBinder) Close() error {
	return errors.Join(b.link.Close(), b.objs.Close())
}
