package sockops

import (
	"bufio"
	"compress/gzip"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"strconv"
	"strings"
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
	syn  map[netip.Addr]time.Duration
	// existing: the iterator of rtoexisting.bpf.c, loaded on first use
	// (with the rto_max map of objs); existingErr: it could not be.
	existing    *rtoexistingObjects
	iter        *link.Iter
	existingErr error
}

// NewRTOCapper loads and attaches the program for the network namespace
// with the given cookie (0 = every namespace).
func NewRTOCapper(netnsCookie uint64) (*RTOCapper, error) {
	spec, err := loadRto()
	if err != nil {
		return nil, err
	}
	r := &RTOCapper{want: map[netip.Addr]time.Duration{}, syn: map[netip.Addr]time.Duration{}}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &r.objs); err != nil {
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
	return syncMap(r.objs.RtoMax, r.want, want, addrKey, func(d time.Duration) uint32 { return uint32(d.Milliseconds()) })
}

// SetSynRTO makes the SYN timeout map equal to want: joining subflows
// (MP_JOIN) from these local addresses retransmit their SYN at this
// interval (the kernel does so linearly tcp_syn_linear_timeouts times,
// then backs off). The kernel counts the timeout in jiffies; it is at
// least one.
func (r *RTOCapper) SetSynRTO(want map[netip.Addr]time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return syncMap(r.objs.SynRto, r.syn, want, addrKey, Jiffies)
}

// Jiffies converts a duration to the kernel's ticks (CONFIG_HZ), rounding
// up, at least 1.
func Jiffies(d time.Duration) uint32 {
	hz := kernelHZ()
	j := (int64(d)*int64(hz) + int64(time.Second) - 1) / int64(time.Second)
	return uint32(max(j, 1))
}

// Tick is the kernel's timer tick (1/CONFIG_HZ), the unit Jiffies
// counts in.
func Tick() time.Duration { return time.Second / time.Duration(kernelHZ()) }

var (
	hzOnce sync.Once
	hz     int
)

// kernelHZ reads CONFIG_HZ from the kernel's config (/proc/config.gz or
// /boot/config-RELEASE); when neither is there it takes 1000, the most
// common value, whose error makes a timeout longer, never shorter, than
// asked on a kernel with fewer ticks per second (250: four times longer).
func kernelHZ() int {
	hzOnce.Do(func() {
		hz = 1000
		if v, ok := readKernelConfig("CONFIG_HZ"); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				hz = n
			}
		}
	})
	return hz
}

func readKernelConfig(key string) (string, bool) {
	var rd io.Reader
	if f, err := os.Open("/proc/config.gz"); err == nil {
		defer f.Close()
		if z, err := gzip.NewReader(f); err == nil {
			rd = z
		}
	}
	if rd == nil {
		var uts unix.Utsname
		if unix.Uname(&uts) != nil {
			return "", false
		}
		f, err := os.Open("/boot/config-" + unix.ByteSliceToString(uts.Release[:]))
		if err != nil {
			return "", false
		}
		defer f.Close()
		rd = f
	}
	sc := bufio.NewScanner(rd)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), key+"="); ok {
			return v, true
		}
	}
	return "", false
}

// ApplyToExisting gives the subflows already established in the calling
// thread's namespace what the sockops program gives new ones: the RTO cap
// of their local address (Set), and TCP_NOTSENT_LOWAT notsent bytes (0:
// left alone) except on subflows of the congestion controls in except. A
// policy given at run time (mpsteer prefer) finds its connections
// established; without this their subflows kept the kernel's 120 s RTO
// cap and unbounded unsent queues.
func (r *RTOCapper) ApplyToExisting(notsent int, except []string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.loadExisting(); err != nil {
		return err
	}
	conf := rtoexistingExistingConf{NotsentLowat: uint32(max(notsent, 0))}
	if err := ccNames(&conf.LowatExcept, except); err != nil {
		return err
	}
	if err := r.existing.ExistingConf.Put(uint32(0), &conf); err != nil {
		return fmt.Errorf("the existing subflows' settings: %w", err)
	}
	if err := bpfutil.RunIter(r.iter); err != nil {
		return fmt.Errorf("the existing subflows' iterator: %w", err)
	}
	return nil
}

// loadExisting loads and attaches the iterator once; a failure is kept
// (the RTO caps of new subflows do not depend on it).
func (r *RTOCapper) loadExisting() error {
	if r.existing != nil || r.existingErr != nil {
		return r.existingErr
	}
	spec, err := loadRtoexisting()
	if err == nil {
		objs := &rtoexistingObjects{}
		err = spec.LoadAndAssign(objs, &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{"rto_max": r.objs.RtoMax}})
		if err == nil {
			it, aerr := link.AttachIter(link.IterOptions{Program: objs.MpsteerRtoExisting})
			if aerr != nil {
				objs.Close()
				err = aerr
			} else {
				r.existing, r.iter = objs, it
				return nil
			}
		}
	}
	r.existingErr = fmt.Errorf("the existing subflows' iterator: %w", bpfutil.VerifierDetail(err))
	return r.existingErr
}

// Stats counts sockets seen, MPTCP subflows seen, timeouts set, answered
// probes given back the initial window, and settings given to subflows
// that were established before (ApplyToExisting).
func (r *RTOCapper) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"sockets", "subflows", "rto_max_set", "failed", "syn_timeouts_set", "probe_windows_restored"} {
		var v uint64
		if err := r.objs.RtoStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.existing != nil {
		for i, name := range []string{"existing_set", "existing_failed", "existing_lowat_excepted"} {
			var v uint64
			if err := r.existing.ExistingStats.Lookup(uint32(i), &v); err == nil {
				out[name] = v
			}
		}
	}
	return out
}

// Close detaches and unloads.
func (r *RTOCapper) Close() error {
	var it, ex error
	if r.iter != nil {
		it = r.iter.Close()
	}
	if r.existing != nil {
		ex = r.existing.Close()
	}
	return errors.Join(it, ex, r.link.Close(), r.objs.Close())
}
