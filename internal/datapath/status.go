package datapath

import (
	"fmt"
	"sort"

	"github.com/cilium/ebpf"
)

// ChainStatus is a chain and its counters.
type ChainStatus struct {
	ChainSpec
	Ifindex int `json:"ifindex"`
	// Attach is how the chain sits on its hook: "tcx", or "tc clsact"
	// (kernels before 6.6) at TCPriority; empty for a chain not attached.
	Attach     string `json:"attach,omitempty"`
	TCPriority uint16 `json:"tc_priority,omitempty"`
	// LeaseFailures counts the renewals of the lease of chains on tc
	// clsact that failed, with the last error (lease.go): a lease not
	// renewed for LeaseTTL lets every such chain pass every packet.
	LeaseFailures int         `json:"lease_renewals_failed,omitempty"`
	LeaseError    string      `json:"lease_error,omitempty"`
	Steps         []StepCount `json:"steps"`
	Seen          uint64      `json:"seen_packets"`
	Selected      uint64      `json:"selected_packets"`
	Bytes         uint64      `json:"selected_bytes"`
	Modified      uint64      `json:"modified_packets"`
	Dropped       uint64      `json:"dropped_packets"`
	Skipped       uint64      `json:"skipped_packets"`
	Errors        uint64      `json:"errors"`
	FirstNs       uint64      `json:"first_packet_ktime_ns,omitempty"`
	// CPUTimeNs is the kernel's count of the time spent in the chain
	// (entry and every step), kept while BPF run-time statistics are on
	// (sysctl kernel.bpf_stats_enabled=1, or a benchmark holding them).
	CPUTimeNs uint64     `json:"cpu_time_ns,omitempty"`
	Withheld  []Withheld `json:"withheld_add_addr,omitempty"`
	// ReleasePending counts the withheld ADD_ADDR options released
	// (chain release) and not yet put back into a packet.
	ReleasePending uint64 `json:"release_pending_options,omitempty"`
}

// StepCount is one step with its count actor's counters.
type StepCount struct {
	Text    string `json:"step"`
	Program string `json:"program"`
	Packets uint64 `json:"packets,omitempty"`
	Bytes   uint64 `json:"bytes,omitempty"`
}

// List reports every chain with its counters.
func (m *Manager) List() []*ChainStatus {
	m.mu.Lock()
	defer m.mu.Unlock()
	var ids []uint32
	for id := range m.chains {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	var out []*ChainStatus
	for _, id := range ids {
		out = append(out, m.status(m.chains[id]))
	}
	return out
}

// Status reports one chain.
func (m *Manager) Status(id uint32) (*ChainStatus, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.chains[id]
	if !ok {
		return nil, fmt.Errorf("no chain %d", id)
	}
	return m.status(c), nil
}

// status reads a chain's state; with m.mu or m.ops held (what it reads
// changes only with both).
func (m *Manager) status(c *chain) *ChainStatus {
	st := &ChainStatus{ChainSpec: c.spec, Ifindex: c.ifindex, ReleasePending: m.releasePending(c.spec.ID)}
	st.Attach, st.TCPriority = c.mechanism()
	if _, ok := c.att.(*clsactAttachment); ok && m.lease != nil && m.lease.err != nil {
		st.LeaseFailures, st.LeaseError = m.lease.failures, m.lease.err.Error()
	}
	// One program: its run time covers the chain (loaded actors are
	// reached by tail calls, which do not return).
	st.CPUTimeNs = c.runtime()
	var per []stepsMpsteerStats
	if err := m.objs.MpsteerStats.Lookup(c.spec.ID, &per); err == nil {
		for _, s := range per {
			st.Seen += s.Seen
			st.Selected += s.Selected
			st.Bytes += s.Bytes
			st.Modified += s.Modified
			st.Dropped += s.Dropped
			st.Skipped += s.Skipped
			st.Errors += s.Errors
			if s.FirstNs != 0 && (st.FirstNs == 0 || s.FirstNs < st.FirstNs) {
				st.FirstNs = s.FirstNs
			}
		}
	}
	for i, s := range c.prog.Steps {
		sc := StepCount{Text: s.Text, Program: s.Prog}
		var counts [][2]uint64
		if m.objs.MpsteerStepCount.Lookup(c.slot*MaxSteps+uint32(i), &counts) == nil {
			for _, v := range counts {
				sc.Packets += v[0]
				sc.Bytes += v[1]
			}
		}
		st.Steps = append(st.Steps, sc)
	}
	var k stepsWithheldKey
	var v stepsWithheldVal
	it := m.objs.MpsteerWithheld.Iterate()
	for it.Next(&k, &v) {
		if k.Chain != c.spec.ID {
			continue
		}
		st.Withheld = append(st.Withheld, Withheld{AddrID: k.AddrId, Subflow: keySubflow(k),
			Option: fmt.Sprintf("%x", v.Opt[:min(int(v.Len), len(v.Opt))]), Released: v.Release != withheldKept, PutBack: v.Release == withheldPutBack})
	}
	return st
}

// zeroStepCounts clears the per-step counters of one descriptor slot.
func (m *Manager) zeroStepCounts(slot uint32) {
	zero := make([][2]uint64, ebpf.MustPossibleCPU())
	for i := uint32(0); i < MaxSteps; i++ {
		m.objs.MpsteerStepCount.Put(slot*MaxSteps+i, zero)
	}
}

func (m *Manager) resetStats(id uint32) {
	zero := make([]stepsMpsteerStats, ebpf.MustPossibleCPU())
	m.objs.MpsteerStats.Put(id, zero)
	for slot := id * 2; slot < id*2+2; slot++ {
		m.zeroStepCounts(slot)
	}
}
