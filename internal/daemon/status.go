package daemon

import (
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/metrics"
	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
	"mpsteer/internal/stats"
)

// Status builds the API's status.
func (d *Daemon) Status() api.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := api.Status{PID: os.Getpid(), NetNS: d.netns, Config: d.cfg.File, PathManager: d.pmMode, BackupVia: d.apply.flags.Mode(),
		IntervalMs: float64(d.cfg.Interval) / 1e6, Hint: d.hint, Actions: append([]api.ActionRecord(nil), d.records.recent...)}
	for _, p := range d.engine.Policies {
		st.Policies = append(st.Policies, api.PolicyStatus{Name: p.Name(), Status: p.Status()})
	}
	scopes := scopedCgroups(d.engine)
	byTok := map[uint32]*api.ConnStatus{}
	var toks []uint32
	conn := func(tok uint32) *api.ConnStatus {
		c := byTok[tok]
		if c == nil {
			c = &api.ConnStatus{Token: fmt.Sprintf("%08x", tok), Actions: d.records.connActions[tok]}
			if dc, ok := d.view.conns[tok]; ok {
				c.Local, c.Remote = dc.Local.String(), dc.Remote.String()
				c.CgroupID = dc.CgroupID
				c.Cgroup = d.scope.resolve(dc.CgroupID, scopes, time.Now())
			}
			if ev, ok := d.tracker.Conn(tok); ok {
				c.ServerSide = ev.ServerSide
				for id, a := range ev.RemoteAddrs {
					c.RemoteAddrs = append(c.RemoteAddrs, fmt.Sprintf("%d=%s", id, a))
				}
				sort.Strings(c.RemoteAddrs)
			}
			byTok[tok] = c
			toks = append(toks, tok)
		}
		return c
	}
	for _, sf := range d.view.subflows {
		if sf.State != observe.TCPEstablished && sf.State != observe.TCPSynSent && sf.State != observe.TCPSynRecv {
			continue
		}
		c := conn(sf.Token)
		ss := subflowStatus(sf)
		if dec, ok := d.lastPlan.Backup[policy.ID(sf)]; ok {
			ss.Decision = &api.Decision{Policy: dec.Policy, Backup: dec.Backup, Reason: dec.Reason}
		}
		ss.Health = d.subflowHealth(sf, time.Now()) // health.go
		if l, ok := d.lastPlan.Limits[policy.ID(sf)]; ok && l.Rate > 0 {
			ss.Cap = &api.Cap{Policy: l.Policy, Rate: l.Rate.String(), Reason: l.Reason}
		}
		c.Subflows = append(c.Subflows, ss)
	}
	sort.Slice(toks, func(i, j int) bool { return toks[i] < toks[j] })
	for _, t := range toks {
		for _, p := range d.engine.Policies {
			if cd, ok := p.(policy.ConnDescriber); ok {
				if s := cd.ConnSteering(t); s != "" {
					byTok[t].Steering = append(byTok[t].Steering, s)
				}
			}
		}
		st.Connections = append(st.Connections, *byTok[t])
	}
	st.Reaction = latencyStats(d.loop.reactions)
	if d.progs.rto != nil {
		st.RTO = d.progs.rto.Stats()
	}
	if d.progs.initial != nil {
		st.AvoidInitial = map[string]any{"addr": d.progs.initial.Addr().String(), "counters": d.progs.initial.Stats()}
	}
	st.Coupled = d.progs.coupled.status() // coupled.go
	st.RateProgram = d.apply.rates.Stats()
	if d.dp != nil {
		st.Chains, _ = json.Marshal(d.dp.List())
	}
	st.Endpoints = d.apply.flags.Endpoints()
	st.Loop = d.loopStatus()
	st.StateError = d.records.stateErr
	if d.state != nil {
		st.StateFile = d.state.Path()
	}
	st.Health = d.healthStatus()   // health.go
	st.Mptcpize = d.scope.status() // appscope.go
	return st
}

func subflowStatus(sf observe.Subflow) api.SubflowStatus {
	return api.SubflowStatus{Local: sf.Local.String(), Remote: sf.Remote.String(), State: metrics.StateName(sf.State),
		LocalID: sf.LocalID, RemoteID: sf.RemoteID, BackupLocal: sf.BackupLocal, BackupRemote: sf.BackupRemote,
		SRTTMs: float64(sf.SRTT) / 1e6, Cwnd: sf.Cwnd, DeliveryMbit: float64(sf.DeliveryRate) * 8 / 1e6,
		BytesAcked: sf.BytesAcked, Retransmits: sf.TotalRetrans}
}

func latencyStats(ds []time.Duration) api.Latency {
	if len(ds) == 0 {
		return api.Latency{}
	}
	q := stats.Durations(ds, 0.5, 0.99)
	return api.Latency{Count: len(ds), MedianUs: float64(q[0]) / 1e3, P99Us: float64(q[1]) / 1e3}
}
