package sockops

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
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

// Cap is what a Pacer holds a subflow to.
type Cap struct {
	// Rate in bytes per second (Unlimited: none).
	Rate uint64
	// NotSent is the subflow's TCP_NOTSENT_LOWAT while the cap holds, in
	// bytes (0: the socket's own): how much MPTCP may queue, unsent, on
	// it. The socket's own value is put back when the cap is lifted.
	// ByPacing only.
	NotSent uint32
}

// CapWay is how a Pacer holds a subflow to its rate.
type CapWay uint32

const (
	// ByPacing sets the subflow's maximum pacing rate
	// (SO_MAX_PACING_RATE, which also turns TCP's internal pacing on).
	ByPacing CapWay = 0
	// ByCongestionControl switches the subflow to mpsteer's capping
	// congestion control (bpf/capcc.bpf.c: Reno with the window held to
	// rate × SRTT), and back to the one it had when the cap is lifted.
	ByCongestionControl CapWay = 1
)

// Pacer limits the sending rate of chosen MPTCP subflows, set by a cgroup
// sockops program on each subflow's next ACK after the rate changes, in
// one of the CapWays. It sees the subflows established after it was
// attached (it asks the kernel for a callback on every RTT sample of
// each); older subflows are not limited. ByPacing also applies a changed
// cap at once, by a TCP socket iterator (bpf/ratenow.bpf.c) that Set
// runs: an idle subflow, which has no ACK to come, is capped before it
// is handed data. Where the kernel refuses the iterator, caps wait for
// the next ACK (Stats: at_once_unavailable).
type Pacer struct {
	mu     sync.Mutex
	way    CapWay
	objs   rateObjects
	link   link.Link
	cc     capccObjects // ByCongestionControl
	ccLink link.Link
	ccName string
	want   map[Subflow4]Cap
	// ByPacing: the iterator that applies caps at once (nil: refused,
	// nowErr says why).
	now     ratenowObjects
	nowLink *link.Iter
	nowErr  error
}

// NewPacer loads and attaches the program for the network namespace with
// the given cookie (0 = every namespace). ByCongestionControl also
// registers the capping congestion control, under a name of this process
// (congestion controls are named host-wide).
func NewPacer(netnsCookie uint64, way CapWay) (*Pacer, error) {
	spec, err := loadRate()
	if err != nil {
		return nil, err
	}
	p := &Pacer{way: way, want: map[Subflow4]Cap{}}
	if way == ByCongestionControl {
		p.ccName = fmt.Sprintf("mpscap_%d", os.Getpid())
		var name [16]byte
		copy(name[:], p.ccName)
		if err := spec.Variables["cap_cc"].Set(name); err != nil {
			return nil, err
		}
	}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &p.objs); err != nil {
		return nil, fmt.Errorf("load the sockops rate program: %w", bpfutil.VerifierDetail(err))
	}
	if way == ByCongestionControl {
		if err := p.loadCC(); err != nil {
			p.objs.Close()
			return nil, err
		}
	}
	if p.link, err = bpfutil.AttachSockOps(p.objs.MpsteerRate, "rate"); err != nil {
		p.closeCC()
		p.objs.Close()
		return nil, err
	}
	if way == ByPacing {
		p.nowErr = p.loadNow()
	}
	return p, nil
}

// loadNow loads the iterator that applies caps at once, on the rate
// program's map.
func (p *Pacer) loadNow() error {
	spec, err := loadRatenow()
	if err != nil {
		return err
	}
	if err := spec.LoadAndAssign(&p.now, p.sharedMaps()); err != nil {
		return fmt.Errorf("load the TCP iterator that applies caps at once: %w", bpfutil.VerifierDetail(err))
	}
	if p.nowLink, err = link.AttachIter(link.IterOptions{Program: p.now.MpsteerRateNow}); err != nil {
		p.now.Close()
		return fmt.Errorf("attach the TCP iterator that applies caps at once: %w", err)
	}
	return nil
}

// AtOnceErr says why caps wait for each subflow's next ACK (nil: they
// are applied at once).
func (p *Pacer) AtOnceErr() error {
	if p.way != ByPacing {
		return errors.New("caps held by the capping congestion control take effect on the next ACK")
	}
	return p.nowErr
}

// sharedMaps has the iterator and the capping congestion control use the
// rate program's maps: the caps the daemon writes, and what was done with
// them.
func (p *Pacer) sharedMaps() *ebpf.CollectionOptions {
	return &ebpf.CollectionOptions{MapReplacements: map[string]*ebpf.Map{
		"rate_limit": p.objs.RateLimit,
		"rate_done":  p.objs.RateDone,
	}}
}

// applyNow runs the iterator over the namespace's TCP sockets: every
// subflow whose cap changed takes it now.
func (p *Pacer) applyNow() error {
	if p.nowLink == nil {
		return nil
	}
	if err := bpfutil.RunIter(p.nowLink); err != nil {
		return fmt.Errorf("run the TCP iterator that applies caps: %w", err)
	}
	return nil
}

func (p *Pacer) closeNow() error {
	if p.nowLink == nil {
		return nil
	}
	return errors.Join(p.nowLink.Close(), p.now.Close())
}

// loadCC loads the capping congestion control on the rate program's map
// and registers it under p.ccName.
func (p *Pacer) loadCC() error {
	spec, err := loadCapcc()
	if err != nil {
		return err
	}
	ms := spec.Maps["mpsteer_capcc"]
	st, ok := ms.Value.(*btf.Struct)
	if !ok || len(ms.Contents) != 1 {
		return errors.New("the capping congestion control's object has no tcp_congestion_ops")
	}
	val, ok := ms.Contents[0].Value.([]byte)
	if !ok {
		return errors.New("the capping congestion control's tcp_congestion_ops has no value")
	}
	val = slices.Clone(val)
	for _, m := range st.Members {
		if m.Name == "name" {
			off := m.Offset.Bytes()
			clear(val[off : off+16])
			copy(val[off:off+15], p.ccName)
		}
	}
	ms.Contents[0].Value = val
	if err := spec.LoadAndAssign(&p.cc, p.sharedMaps()); err != nil {
		return fmt.Errorf("load the capping congestion control (struct_ops tcp_congestion_ops): %w", bpfutil.VerifierDetail(err))
	}
	if p.ccLink, err = link.AttachStructOps(link.StructOpsOptions{Map: p.cc.MpsteerCapcc}); err != nil {
		p.cc.Close()
		return fmt.Errorf("register the capping congestion control %s: %w", p.ccName, err)
	}
	return nil
}

func (p *Pacer) closeCC() error {
	if p.ccLink == nil {
		return nil
	}
	return errors.Join(p.ccLink.Close(), p.cc.Close())
}

// CongestionControl is the name the capping congestion control is
// registered under ("" unless ByCongestionControl).
func (p *Pacer) CongestionControl() string { return p.ccName }

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

// lifted is the Cap of a subflow no longer limited.
var lifted = Cap{Rate: Unlimited}

// Set makes the limits those of want: subflows no longer in want get
// Unlimited (and their own TCP_NOTSENT_LOWAT back), and their entries go
// once the socket has taken it (Forget removes those of subflows that are
// gone).
func (p *Pacer) Set(want map[Subflow4]Cap) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	var errs error
	changed := false
	for sf, old := range p.want {
		if _, keep := want[sf]; keep || old == lifted {
			continue
		}
		if err := p.update(sf, lifted); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		p.want[sf], changed = lifted, true
	}
	for sf, c := range want {
		c.Rate = min(c.Rate, Unlimited)
		if p.way != ByPacing {
			c.NotSent = 0
		}
		if p.want[sf] == c {
			continue
		}
		if err := p.update(sf, c); err != nil {
			errs = errors.Join(errs, err)
			continue
		}
		p.want[sf], changed = c, true
	}
	if changed {
		errs = errors.Join(errs, p.applyNow())
	}
	return errs
}

// update writes a subflow's cap, whole: what the programs did with it
// (what the socket has, the congestion control and TCP_NOTSENT_LOWAT to
// go back to) is in rate_done, which only they write, so nothing they
// write between two of the daemon's is lost.
func (p *Pacer) update(sf Subflow4, c Cap) error {
	k := flowKey(sf)
	v := rateRateVal{Rate: c.Rate, Notsent: c.NotSent, Via: uint32(p.way)}
	return p.objs.RateLimit.Update(&k, &v, ebpf.UpdateAny)
}

// Applied reports the rate the socket has taken (ok false: not yet, or
// the subflow is not known to the program, or its TCP_NOTSENT_LOWAT is
// not yet what the cap wants).
func (p *Pacer) Applied(sf Subflow4) (uint64, bool) {
	k := flowKey(sf)
	var v rateRateVal
	if err := p.objs.RateLimit.Lookup(&k, &v); err != nil {
		return 0, false
	}
	var d rateRateDone // none yet: nothing applied
	_ = p.objs.RateDone.Lookup(&k, &d)
	return d.Applied, d.Applied == v.Rate && !notSentDue(v, d)
}

// notSentDue mirrors bpf/rate.h's notsent_due: the socket's
// TCP_NOTSENT_LOWAT is not yet what the entry wants.
func notSentDue(v rateRateVal, d rateRateDone) bool {
	if v.Notsent != 0 && v.Rate < Unlimited {
		return d.NotsentSaved == 0 || d.NotsentApplied != v.Notsent
	}
	return d.NotsentSaved != 0
}

// Forget drops the entries of subflows that are gone (live reports
// whether one still exists) and of lifted limits already applied.
func (p *Pacer) Forget(live func(Subflow4) bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for sf, c := range p.want {
		r, taken := p.Applied(sf)
		if !live(sf) || c == lifted && taken && r == Unlimited {
			// The cap first: a program that finds no cap makes no
			// rate_done entry.
			k := flowKey(sf)
			_ = p.objs.RateLimit.Delete(&k)
			_ = p.objs.RateDone.Delete(&k)
			delete(p.want, sf)
		}
	}
}

// Stats counts subflows seen, rates set, congestion controls switched,
// and (ByCongestionControl) ACKs seen by the capping congestion control
// and windows it cut.
func (p *Pacer) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range []string{"subflows", "rate_set", "failed", "cc_switched", "notsent_set"} {
		var v uint64
		if err := p.objs.RateStats.Lookup(uint32(i), &v); err == nil {
			out[name] = v
		}
	}
	if p.nowLink != nil {
		for i, name := range []string{"set_at_once", "failed_at_once", "notsent_set_at_once"} {
			var v uint64
			if err := p.now.RatenowStats.Lookup(uint32(i), &v); err == nil {
				out[name] = v
			}
		}
	} else if p.way == ByPacing {
		out["at_once_unavailable"] = 1
	}
	if p.ccLink != nil {
		for i, name := range []string{"cc_acks", "cc_windows_cut"} {
			var per []uint64
			if err := p.cc.CapccStats.Lookup(uint32(i), &per); err == nil {
				var sum uint64
				for _, v := range per {
					sum += v
				}
				out[name] = sum
			}
		}
	}
	return out
}

// Close lifts every limit, gives the sockets up to wait to take that on
// their next ACKs (ByPacing with the iterator: at once), then detaches
// and unloads. A limit a socket has not taken by then (an idle subflow
// under the capping congestion control) stays on it: the subflow keeps
// working, at that rate, and the others are not limited.
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
	// A subflow still on the capping congestion control keeps it (and its
	// cap) after this: the kernel holds the registration for the sockets
	// that use it.
	return errors.Join(lift, p.link.Close(), p.closeNow(), p.closeCC(), p.objs.Close())
}

// ProbeCongestionControl registers the capping congestion control under a
// name of this process and takes it away again: nil when the kernel can
// run it (struct_ops links, the kfuncs of Reno it calls).
func ProbeCongestionControl() error {
	spec, err := loadRate()
	if err != nil {
		return err
	}
	p := &Pacer{ccName: fmt.Sprintf("mpsprobe_%d", os.Getpid())}
	if err := bpfutil.LoadInNetns(spec, 0, &p.objs); err != nil {
		return fmt.Errorf("load the sockops rate program: %w", bpfutil.VerifierDetail(err))
	}
	defer p.objs.Close()
	if err := p.loadCC(); err != nil {
		return err
	}
	return p.closeCC()
}
