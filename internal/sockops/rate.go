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

// Subflow4 names a subflow by its local and remote address and port.
type Subflow4 struct {
	Local, Remote netip.AddrPort
}

// Unlimited is the pacing rate that means no limit (SO_MAX_PACING_RATE
// takes 32 bits from BPF: ~0U bytes per second is "none").
const Unlimited = uint64(^uint32(0))

// Pacer limits the sending rate of chosen MPTCP subflows through their
// maximum pacing rate, set by a cgroup sockops program on each subflow's
// next ACK after the rate changes. It sees the subflows established after
// it was attached (it asks the kernel for a callback on every RTT sample
// of each); older subflows are not limited.
type Pacer struct {
	mu   sync.Mutex
	objs rateObjects
	link link.Link
	want map[Subflow4]uint64 // bytes per second
}

// NewPacer loads and attaches the program for the network namespace with
// the given cookie (0 = every namespace).
func NewPacer(netnsCookie uint64) (*Pacer, error) {
	spec, err := loadRate()
	if err != nil {
		return nil, err
	}
	p := &Pacer{want: map[Subflow4]uint64{}}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &p.objs); err != nil {
		return nil, fmt.Errorf("load the sockops rate program: %w", bpfutil.VerifierDetail(err))
	}
	if p.link, err = bpfutil.AttachSockOps(p.objs.MpsteerRate, "rate"); err != nil {
		p.objs.Close()
		return nil, err
	}
	return p, nil
}

func flowKey(sf Subflow4) rateFlowKey {
	var k rateFlowKey
	la, ra := sf.Local.Addr(), sf.Remote.Addr()
	if la.Is4() {
		k.Family = unix.AF_INET
		l, r := la.As4(), ra.As4()
		k.Laddr[0], k.Raddr[0] = nativeFromBytes(l[:]), nativeFromBytes(r[:])
	} else {
		k.Family = unix.AF_INET6
		l, r := la.As16(), ra.As16()
		for i := 0; i < 4; i++ {
			k.Laddr[i], k.Raddr[i] = nativeFromBytes(l[4*i:4*i+4]), nativeFromBytes(r[4*i:4*i+4])
		}
	}
	k.Lport, k.Rport = sf.Local.Port(), sf.Remote.Port()
	return k
}

// Set makes the limits those of want (bytes per second per subflow):
// subflows no longer in want get Unlimited, and their entries go once the
// socket has taken it (Forget removes those of subflows that are gone).
func (p *Pacer) Set(want map[Subflow4]uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs error
	for sf, old := range p.want {
		if _, keep := want[sf]; keep || old == Unlimited {
			continue
		}
		k := flowKey(sf)
		if err := p.objs.RateLimit.Update(&k, &rateRateVal{Rate: Unlimited}, ebpf.UpdateAny); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		p.want[sf] = Unlimited
	}
	for sf, r := range want {
		if p.want[sf] == r {
			continue
		}
		k := flowKey(sf)
		var cur rateRateVal
		_ = p.objs.RateLimit.Lookup(&k, &cur)
		if err := p.objs.RateLimit.Update(&k, &rateRateVal{Rate: min(r, Unlimited), Applied: cur.Applied}, ebpf.UpdateAny); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		p.want[sf] = r
	}
	return errs
}

// Applied reports the rate the socket has taken (ok false: not yet, or
// the subflow is not known to the program).
func (p *Pacer) Applied(sf Subflow4) (uint64, bool) {
	k := flowKey(sf)
	var v rateRateVal
	if err := p.objs.RateLimit.Lookup(&k, &v); err != nil {
		return 0, false
	}
	return v.Applied, v.Applied == v.Rate
}

// Forget drops the entries of subflows that are gone (live reports
// whether one still exists) and of lifted limits already applied.
func (p *Pacer) Forget(live func(Subflow4) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for sf, r := range p.want {
		k := flowKey(sf)
		var v rateRateVal
		lifted := r == Unlimited && p.objs.RateLimit.Lookup(&k, &v) == nil && v.Applied == Unlimited
		if !live(sf) || lifted {
			_ = p.objs.RateLimit.Delete(&k)
			delete(p.want, sf)
		}
	}
}

// Stats counts subflows seen and rates set.
func (p *Pacer) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"subflows", "rate_set", "failed"} {
		var v uint64
		if err := p.objs.RateStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	return out
}

// Close lifts every limit, gives the sockets up to wait to take that on
// their next ACKs, then detaches and unloads. A limit a socket has not
// taken by then (an idle subflow) stays on it: the subflow keeps working,
// at that rate, and the others are not limited.
func (p *Pacer) Close(wait time.Duration) error {
	lift := p.Set(nil)
	deadline := time.Now().Add(wait)
	for time.Now().Before(deadline) {
		pending := false
		p.mu.Lock()
		for sf := range p.want {
			if r, ok := p.Applied(sf); !ok || r != Unlimited {
				pending = true
				break
			}
		}
		p.mu.Unlock()
		if !pending {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	return errors.Join(lift, p.link.Close(), p.objs.Close())
}
