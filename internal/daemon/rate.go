package daemon

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

// Ways to cap a subflow's rate (config key rate_via).
const (
	// RatePacing caps the subflow's maximum pacing rate from a sockops
	// program: the sender paces at the cap, and MPTCP's scheduler, which
	// weighs subflows by their pacing rate, sends less there.
	RatePacing = "pacing"
	// RateRwnd clamps the receive window the peer advertises on the
	// subflow's incoming ACKs to cap × SRTT, with a datapath chain.
	RateRwnd = "rwnd"
	// RateCC switches the subflow to mpsteer's capping congestion control
	// (a tcp_congestion_ops struct_ops: Reno with the window held to
	// cap × SRTT) from the same sockops program, and back when the cap is
	// lifted.
	RateCC = "cc"
)

// rateActuator enforces Limit decisions one way or the other.
type rateActuator struct {
	via    string
	cookie uint64
	pacer  *sockops.Pacer
	err    string // the pacer could not be loaded: said once
	dp     func() (*datapath.Manager, error)
	chains map[policy.SubflowID]uint32 // rwnd: one chain per capped subflow
	caps   map[policy.SubflowID]capState
}

type capState struct {
	rate  units.Rate
	token uint32
}

func newRateActuator(via string, cookie uint64, dp func() (*datapath.Manager, error)) *rateActuator {
	return &rateActuator{via: via, cookie: cookie, dp: dp, chains: map[policy.SubflowID]uint32{}, caps: map[policy.SubflowID]capState{}}
}

// Ready loads what the pacing way needs before any subflow is to be
// capped: the sockops program sees subflows established after it.
func (a *rateActuator) Ready() error {
	if a.via == RateRwnd || a.pacer != nil || a.err != "" {
		return nil
	}
	way := sockops.ByPacing
	if a.via == RateCC {
		way = sockops.ByCongestionControl
	}
	p, err := sockops.NewPacer(a.cookie, way)
	if err != nil {
		a.err = err.Error()
		return err
	}
	a.pacer = p
	return nil
}

func limitRecord(id policy.SubflowID, token uint32, r units.Rate, who, reason string, err error) api.ActionRecord {
	rec := record(string(policy.Limit), id.String(), err)
	rec.Token = fmt.Sprintf("%08x", token)
	rec.Rate = policy.RateText(r)
	rec.Policy, rec.Reason = who, reason
	return rec
}

// Apply makes the caps those decided for the given subflows; a full apply
// lifts the caps nobody decides any more and forgets subflows that are gone.
func (a *rateActuator) Apply(dec map[policy.SubflowID]policy.Action, sfs []observe.Subflow, full bool) []api.ActionRecord {
	var out []api.ActionRecord
	for _, sf := range sfs {
		id := policy.ID(sf)
		d, decided := dec[id]
		cur, capped := a.caps[id]
		switch {
		case decided && d.Rate > 0 && (!capped || cur.rate != d.Rate):
			err := a.set(id, d.Rate)
			out = append(out, limitRecord(id, sf.Token, d.Rate, d.Policy, d.Reason, err))
			if err == nil {
				a.caps[id] = capState{d.Rate, sf.Token}
			}
		case capped && (decided && d.Rate <= 0 || !decided && full):
			why, who := "no policy caps it any more", ""
			if decided {
				why, who = d.Reason, d.Policy
			}
			err := a.set(id, 0)
			out = append(out, limitRecord(id, sf.Token, 0, who, why, err))
			if err == nil {
				delete(a.caps, id)
			}
		}
	}
	if full && (len(a.caps) > 0 || a.pacer != nil) {
		live := make(map[policy.SubflowID]bool, len(sfs))
		for _, sf := range sfs {
			live[policy.ID(sf)] = true
		}
		for id := range a.caps {
			if !live[id] {
				a.forget(id)
			}
		}
		if a.pacer != nil {
			a.pacer.Forget(func(sf sockops.Subflow4) bool { return live[policy.NewSubflowID(sf.Local, sf.Remote)] })
		}
	}
	return out
}

// set caps one subflow (0: lifts its cap).
func (a *rateActuator) set(id policy.SubflowID, r units.Rate) error {
	if a.via != RateRwnd {
		if a.pacer == nil {
			if a.err != "" {
				return fmt.Errorf("the rate program is not loaded: %s", a.err)
			}
			return fmt.Errorf("the rate program was not loaded before the subflow was established (the policy that caps rates came with a reload)")
		}
		want := map[sockops.Subflow4]uint64{}
		for oid, st := range a.caps {
			want[subflow4(oid)] = uint64(st.rate.BytesPerSecond())
		}
		if r > 0 {
			want[subflow4(id)] = uint64(r.BytesPerSecond())
		} else {
			delete(want, subflow4(id))
		}
		return a.pacer.Set(want)
	}
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
	for name, addrs := range Interfaces() {
		for _, x := range addrs {
			if x == a {
				return name, nil
			}
		}
	}
	if ifs, err := net.Interfaces(); err == nil {
		for i := range ifs {
			for _, x := range ifaceAddrs(&ifs[i]) {
				if x == a {
					return ifs[i].Name, nil
				}
			}
		}
	}
	return "", fmt.Errorf("no interface holds %s", a)
}

// forget drops a subflow that is gone (its chain, if any).
func (a *rateActuator) forget(id policy.SubflowID) {
	delete(a.caps, id)
	if chain, ok := a.chains[id]; ok {
		if m, err := a.dp(); err == nil {
			m.Del(chain)
		}
		delete(a.chains, id)
	}
}

// Restore lifts every cap (the daemon exits).
func (a *rateActuator) Restore() []api.ActionRecord {
	var out []api.ActionRecord
	for id, st := range a.caps {
		out = append(out, limitRecord(id, st.token, 0, "", "daemon exit", a.set(id, 0)))
		delete(a.caps, id)
	}
	if a.pacer != nil {
		a.pacer.Close(300 * time.Millisecond)
		a.pacer = nil
	}
	return out
}

// Stats reports the rate program's counters (pacing, cc).
func (a *rateActuator) Stats() map[string]uint64 {
	if a.pacer == nil {
		return nil
	}
	return a.pacer.Stats()
}

func subflow4(id policy.SubflowID) sockops.Subflow4 {
	return sockops.Subflow4{Local: id.Local.AddrPort(), Remote: id.Remote.AddrPort()}
}
