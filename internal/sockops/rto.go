package sockops

import (
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// RTOCapper sets TCP_RTO_MAX_MS on new MPTCP subflows from chosen local
// addresses, with a cgroup sockops program. Subflows created before it was
// attached keep their timeout.
type RTOCapper struct {
	mu   sync.Mutex
	objs rtoObjects
	link link.Link
	want map[netip.Addr]time.Duration
}

// NewRTOCapper loads and attaches the program for the network namespace
// with the given cookie (0 = every namespace).
func NewRTOCapper(netnsCookie uint64) (*RTOCapper, error) {
	spec, err := loadRto()
	if err != nil {
		return nil, err
	}
	if err := spec.Variables["netns_cookie"].Set(netnsCookie); err != nil {
		return nil, err
	}
	r := &RTOCapper{want: map[netip.Addr]time.Duration{}}
	if err := spec.LoadAndAssign(&r.objs, nil); err != nil {
		return nil, fmt.Errorf("load the sockops RTO program: %w", bpfutil.VerifierDetail(err))
	}
	if r.link, err = bpfutil.AttachSockOps(r.objs.MpsteerRto, "RTO"); err != nil {
		r.objs.Close()
		return nil, err
	}
	return r, nil
}

func addrKey(a netip.Addr) rtoAddrKey {
	var k rtoAddrKey
	if a.Is4() {
		k.Family = unix.AF_INET
		b := a.As4()
		k.Addr[0] = nativeFromBytes(b[:])
	} else {
		k.Family = unix.AF_INET6
		b := a.As16()
		for i := 0; i < 4; i++ {
			k.Addr[i] = nativeFromBytes(b[4*i : 4*i+4])
		}
	}
	return k
}

// nativeFromBytes reads 4 bytes in network order into the u32 the program
// compares with skops->local_ip4, which holds them as they are in memory.
func nativeFromBytes(b []byte) uint32 {
	return uint32(b[0]) | uint32(b[1])<<8 | uint32(b[2])<<16 | uint32(b[3])<<24
}

// Set makes the map equal to want.
func (r *RTOCapper) Set(want map[netip.Addr]time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	var errs error
	for a := range r.want {
		if _, keep := want[a]; !keep {
			k := addrKey(a)
			if err := r.objs.RtoMax.Delete(&k); err != nil && !errors.Is(err, ebpf.ErrKeyNotExist) {
				errs = errors.Join(errs, err)
			}
			delete(r.want, a)
		}
	}
	for a, d := range want {
		if r.want[a] == d {
			continue
		}
		k := addrKey(a)
		if err := r.objs.RtoMax.Put(&k, uint32(d.Milliseconds())); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		r.want[a] = d
	}
	return errs
}

// Stats counts sockets seen, MPTCP subflows seen, and timeouts set.
func (r *RTOCapper) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"sockets", "subflows", "rto_max_set", "failed"} {
		var v uint64
		if err := r.objs.RtoStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// Close detaches and unloads.
func (r *RTOCapper) Close() error {
	return errors.Join(r.link.Close(), r.objs.Close())
}
