package mptcpize

import (
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// Switcher is the program, attached: sockets made by processes in its
// cgroups (and those below them) in one network namespace become MPTCP.
// Sockets made before a cgroup was added stay as they are.
type Switcher struct {
	mu   sync.Mutex
	objs mptcpizeObjects
	link link.Link
	want map[uint64]bool
}

// New loads and attaches the program for the network namespace with the
// given cookie (0 = every namespace), with no cgroup in scope yet.
func New(netnsCookie uint64) (*Switcher, error) {
	spec, err := loadMptcpize()
	if err != nil {
		return nil, err
	}
	s := &Switcher{want: map[uint64]bool{}}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &s.objs); err != nil {
		if errors.Is(err, unix.EPERM) && os.Geteuid() == 0 {
			return nil, fmt.Errorf("the kernel refused the program that switches applications to MPTCP (an fmod_ret program on update_socket_protocol) even as root: it does not allow BPF trampoline programs (fentry, fexit, fmod_ret), as under some hypervisors: %w", err)
		}
		return nil, fmt.Errorf("switching applications to MPTCP needs the kernel's update_socket_protocol hook (Linux 6.6 or later, with BTF); loading the program failed: %w", bpfutil.VerifierDetail(err))
	}
	s.link, err = link.AttachTracing(link.TracingOptions{Program: s.objs.MpsteerMptcpize, AttachType: ebpf.AttachModifyReturn})
	if err != nil {
		s.objs.Close()
		return nil, fmt.Errorf("attach the program on update_socket_protocol (switching applications to MPTCP): %w", err)
	}
	return s, nil
}

// Set makes the cgroups in scope exactly ids (cgroup v2 ids: the inode
// numbers of their directories).
func (s *Switcher) Set(ids []uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	next := map[uint64]bool{}
	for _, id := range ids {
		next[id] = true
	}
	var errs error
	for id := range s.want {
		if !next[id] {
			if err := s.objs.Scopes.Delete(&id); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = errors.Join(errs, err)
				continue
			}
			delete(s.want, id)
		}
	}
	for id := range next {
		if s.want[id] {
			continue
		}
		one := uint32(1)
		if err := s.objs.Scopes.Put(&id, &one); err != nil {
			errs = errors.Join(errs, fmt.Errorf("cgroup %d: %w", id, err))
			continue
		}
		s.want[id] = true
	}
	return errs
}

// Stats are the program's counters: stream sockets made in the namespace
// (streams) and those it made MPTCP (switched).
func (s *Switcher) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"streams", "switched"} {
		var v uint64
		if err := s.objs.MptcpizeStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// Close detaches the program: new sockets keep the protocol they ask for
// (MPTCP sockets made meanwhile stay MPTCP).
func (s *Switcher) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	var err error
	if s.link != nil {
		err = s.link.Close()
		s.link = nil
	}
	return errors.Join(err, s.objs.Close())
}

// Supported says why this kernel cannot switch applications to MPTCP
// (no update_socket_protocol hook, no BPF trampolines, not allowed), or
// returns nil: it loads and attaches the program and takes it away again.
func Supported() error {
	s, err := New(0)
	if err != nil {
		return err
	}
	return s.Close()
}
