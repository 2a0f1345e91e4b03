package actuator

import (
	"fmt"
	"net"
	"net/netip"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
	"mpsteer/internal/units"
)

// Ways to cap a subflow's rate (the config's rate_via; internal/config
// documents them).
const (
	RatePacing = "pacing"
	RateRwnd   = "rwnd"
	RateCC     = "cc"
)

// Pacer is the sockops program that holds subflows to their caps (a
// *sockops.Pacer): Set replaces the whole table of caps.
type Pacer interface {
	Set(want map[sockops.Subflow4]sockops.Cap) error
	Forget(live func(sockops.Subflow4) bool)
	Stats() map[string]uint64
	Close(grace time.Duration) error
}

// Rates enforces the policies' Limit decisions, one way or the other.
// Every round gives it every established subflow and every decision: what
// changed is applied at once (one write of the pacer's table however many
// caps changed), through the gate, and caps nobody decides any more are
// lifted.
type Rates struct {
	via    string
	cookie uint64
	gate   *Gate
	// newPacer loads the pacing program (a variable for tests).
	newPacer func(cookie uint64, way sockops.CapWay) (Pacer, error)
	pacer    Pacer
	err      string // the pacer could not be loaded: said once
	dp       func() (*datapath.Manager, error)
	chains   map[policy.SubflowID]uint32 // rwnd: one chain per capped subflow
	caps     map[policy.SubflowID]capState
	// atOnceSaid: AtOnceProblem has been asked since the pacer loaded.
	atOnceSaid bool
}

type capState struct {
	rate    units.Rate
	notsent units.Size
	token   uint32
}

// NewRates makes the rate actuator for via (RatePacing, RateRwnd, RateCC);
// dp gives the datapath manager (rwnd's chains).
func NewRates(via string, cookie uint64, gate *Gate, dp func() (*datapath.Manager, error)) *Rates {
	return &Rates{via: via, cookie: cookie, gate: gate, dp: dp, chains: map[policy.SubflowID]uint32{}, caps: map[policy.SubflowID]capState{},
		newPacer: func(cookie uint64, way sockops.CapWay) (Pacer, error) { return sockops.NewPacer(cookie, way) }}
}

// Via is how the caps are enforced.
func (a *Rates) Via() string { return a.via }

// Ready loads what the pacing way needs before any subflow is to be
// capped: the sockops program sees subflows established after it.
func (a *Rates) Ready() error {
	if a.via == RateRwnd || a.pacer != nil || a.err != "" {
		return nil
	}
	way := sockops.ByPacing
	if a.via == RateCC {
		way = sockops.ByCongestionControl
	}
	p, err := a.newPacer(a.cookie, way)
	if err != nil {
		a.err = err.Error()
		return err
	}
	a.pacer = p
	return nil
}

// AtOnceProblem says, once after the pacer has loaded, why its caps take
// hold on each subflow's next ACK instead of at once (sockops.Pacer's
// socket iterator refused by the kernel); nil when they take hold at
// once, for the other ways, or when it was said already.
func (a *Rates) AtOnceProblem() error {
	if a.pacer == nil || a.atOnceSaid || a.via != RatePacing {
		return nil
	}
	a.atOnceSaid = true
	if p, ok := a.pacer.(interface{ AtOnceErr() error }); ok {
		return p.AtOnceErr()
	}
	return nil
}

// change is one cap to set (rate > 0) or lift (rate 0).
type change struct {
	id          policy.SubflowID
	token       uint32
	rate        units.Rate
	notsent     units.Size
	who, reason string
}

// Apply makes the caps those decided for the subflows est.
func (a *Rates) Apply(dec map[policy.SubflowID]policy.Action, est []observe.Subflow, now time.Time) []api.ActionRecord {
	var changes []change
	live := make(map[policy.SubflowID]bool, len(est))
	for _, sf := range est {
		id := policy.ID(sf)
		live[id] = true
		d, decided := dec[id]
		cur, capped := a.caps[id]
		switch {
		case decided && d.Rate > 0 && (!capped || cur.rate != d.Rate || cur.notsent != d.NotSent):
			changes = append(changes, change{id, sf.Token, d.Rate, d.NotSent, d.Policy, d.Reason})
		case capped && (decided && d.Rate <= 0 || !decided):
			why, who := "no policy caps it any more", ""
			if decided {
				why, who = d.Reason, d.Policy
			}
			changes = append(changes, change{id, sf.Token, 0, 0, who, why})
		}
	}
	for id := range a.caps {
		if !live[id] {
			a.forget(id) // its subflow is gone
		}
	}
	if a.pacer != nil {
		// Entries of subflows that are gone, and lifted caps the sockets
		// have taken.
		a.pacer.Forget(func(sf sockops.Subflow4) bool { return live[policy.NewSubflowID(sf.Local, sf.Remote)] })
	}
	if len(changes) == 0 {
		return nil
	}
	if a.via == RateRwnd {
		return a.applyChains(changes, now)
	}
	return a.applyPacer(changes, now)
}

// applyPacer writes the pacer's whole table once, with every change.
func (a *Rates) applyPacer(changes []change, now time.Time) []api.ActionRecord {
	const key = "rates table"
	if !a.gate.Ready(key, now) {
		return nil
	}
	var err error
	if a.pacer == nil {
		if a.err != "" {
			err = fmt.Errorf("the rate program is not loaded: %s", a.err)
		} else {
			err = fmt.Errorf("the rate program was not loaded before the subflow was established (the policy that caps rates came with a reload)")
		}
	} else {
		want := make(map[sockops.Subflow4]sockops.Cap, len(a.caps)+len(changes))
		for id, st := range a.caps {
			want[subflow4(id)] = pacerCap(st.rate, st.notsent)
		}
		for _, c := range changes {
			if c.rate > 0 {
				want[subflow4(c.id)] = pacerCap(c.rate, c.notsent)
			} else {
				delete(want, subflow4(c.id))
			}
		}
		err = a.pacer.Set(want)
	}
	a.gate.Done(key, err, now)
	out := make([]api.ActionRecord, 0, len(changes))
	for _, c := range changes {
		out = append(out, limitRecord(c.id, c.token, c.rate, c.who, c.reason, err))
		if err != nil {
			continue
		}
		if c.rate > 0 {
			a.caps[c.id] = capState{c.rate, c.notsent, c.token}
		} else {
			delete(a.caps, c.id)
		}
	}
	return out
}

// pacerCap is a cap as the pacer takes it.
func pacerCap(r units.Rate, notsent units.Size) sockops.Cap {
	return sockops.Cap{Rate: uint64(r.BytesPerSecond()), NotSent: uint32(min(notsent, units.Size(^uint32(0))))}
}

// applyChains adds, replaces or removes one rwnd chain per change.
func (a *Rates) applyChains(changes []change, now time.Time) []api.ActionRecord {
	var out []api.ActionRecord
	for _, c := range changes {
		key := fmt.Sprintf("rate %s %s", c.id, c.rate)
		if !a.gate.Ready(key, now) {
			continue
		}
		err := a.setChain(c.id, c.rate)
		a.gate.Done(key, err, now)
		out = append(out, limitRecord(c.id, c.token, c.rate, c.who, c.reason, err))
		if err != nil {
			continue
		}
		if c.rate > 0 {
			a.caps[c.id] = capState{c.rate, c.notsent, c.token}
		} else {
			delete(a.caps, c.id)
		}
	}
	return out
}

// setChain caps one subflow with a chain that clamps the window its peer
// advertises (0: lifts the cap).
func (a *Rates) setChain(id policy.SubflowID, r units.Rate) error {
	m, err := a.dp()
	if err != nil {
		return err
	}
	if r <= 0 {
		chain, ok := a.chains[id]
		if !ok {
			return nil
		}
		delete(a.chains, id)
		return m.Del(chain)
	}
	act := fmt.Sprintf("clamp_rwnd(%s)", r)
	if chain, ok := a.chains[id]; ok {
		_, err := m.Replace(chain, rwndSelect(id), act)
		return err
	}
	dev, err := devOf(id.Local.Addr())
	if err != nil {
		return err
	}
	st, err := m.Add(datapath.ChainSpec{Dev: dev, Hook: datapath.Ingress, Select: rwndSelect(id), Act: act})
	if err != nil {
		return err
	}
	a.chains[id] = st.ID
	return nil
}

// rwndSelect picks the subflow's incoming packets (the peer's ACKs).
func rwndSelect(id policy.SubflowID) string {
	return fmt.Sprintf("tuple(src=%s, dst=%s)", id.Remote, id.Local)
}

// devOf finds the interface that holds a local address.
func devOf(a netip.Addr) (string, error) {
	ifs, err := net.Interfaces()
	if err != nil {
		return "", err
	}
	for i := range ifs {
		addrs, err := ifs[i].Addrs()
		if err != nil {
			continue
		}
		for _, x := range addrs {
			if ipn, ok := x.(*net.IPNet); ok {
				if ad, ok := netip.AddrFromSlice(ipn.IP); ok && ad.Unmap() == a.Unmap() {
					return ifs[i].Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", a)
}

// forget drops a subflow that is gone (its chain, if any).
func (a *Rates) forget(id policy.SubflowID) {
	delete(a.caps, id)
	if chain, ok := a.chains[id]; ok {
		if m, err := a.dp(); err == nil {
			m.Del(chain)
		}
		delete(a.chains, id)
	}
}

// Restore lifts every cap (the daemon exits).
func (a *Rates) Restore() []api.ActionRecord {
	var out []api.ActionRecord
	if a.via == RateRwnd {
		for id, st := range a.caps {
			out = append(out, limitRecord(id, st.token, 0, "", "daemon exit", a.setChain(id, 0)))
		}
	} else if len(a.caps) > 0 && a.pacer != nil {
		err := a.pacer.Set(nil)
		for id, st := range a.caps {
			out = append(out, limitRecord(id, st.token, 0, "", "daemon exit", err))
		}
	}
	a.caps = map[policy.SubflowID]capState{}
	if a.pacer != nil {
		a.pacer.Close(300 * time.Millisecond)
		a.pacer = nil
	}
	return out
}

// Stats reports the rate program's counters (pacing, cc).
func (a *Rates) Stats() map[string]uint64 {
	if a.pacer == nil {
		return nil
	}
	return a.pacer.Stats()
}

func subflow4(id policy.SubflowID) sockops.Subflow4 {
	return sockops.Subflow4{Local: id.Local.AddrPort(), Remote: id.Remote.AddrPort()}
}
