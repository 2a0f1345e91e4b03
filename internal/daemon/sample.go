package daemon

import (
	"fmt"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
)

// How the daemon reads its namespace's subflows every interval.
const (
	// SamplerAuto: the BPF iterator where it loads, else sock_diag.
	SamplerAuto = "auto"
	// SamplerIterator: the BPF iterator (internal/observe/subflowiter),
	// one fixed record per subflow; refused at start if it cannot load.
	SamplerIterator = "iterator"
	// SamplerDiag: inet_diag dumps (internal/observe), the kernel
	// building and the daemon parsing netlink attributes per socket.
	SamplerDiag = "sock_diag"
)

// openIterator loads the subflow iterator unless told to use sock_diag.
// At thousands of subflows the iterator costs a fraction of a dump: it
// writes one fixed record per subflow and takes no socket lock.
func (d *Daemon) openIterator(how string) error {
	switch how {
	case "", SamplerAuto, SamplerIterator:
	case SamplerDiag:
		return nil
	default:
		return fmt.Errorf("--sampler %q: want %s, %s or %s", how, SamplerAuto, SamplerIterator, SamplerDiag)
	}
	it, err := subflowiter.New()
	if err != nil {
		if how == SamplerIterator {
			return fmt.Errorf("--sampler %s: %w", SamplerIterator, err)
		}
		d.log.Printf("subflows are read by sock_diag: the BPF iterator did not load (%v)", err)
		return nil
	}
	d.iter = it
	return nil
}

// sampleSubflows reads every subflow of the namespace. The iterator
// fills the array of the sample before last (no one's since the last
// round replaced it: lastSubflows is read and changed only under mu).
func (d *Daemon) sampleSubflows() ([]observe.Subflow, error) {
	if d.iter != nil {
		d.mu.Lock()
		spare := d.spareSubflows
		d.spareSubflows = nil
		d.mu.Unlock()
		return d.iter.Subflows(spare)
	}
	return d.sampler.Subflows()
}

// sampleConns reads the MPTCP connections (their own counters and
// cgroup). When the policies let quiet connections be (quiet.go) and no
// subflow belongs to a connection the last read lacks, the last read
// stands for up to quietRefresh: the policies that run then judge
// connections by their subflows, and a dump costs per connection what
// deciding a busy one does.
func (d *Daemon) sampleConns(sfs []observe.Subflow) map[uint32]observe.Conn {
	d.mu.Lock()
	last, at := d.lastConns, d.connsAt
	reuse := d.engine.QuietAware() && last != nil && time.Since(at) < quietRefresh
	d.mu.Unlock()
	for i := 0; reuse && i < len(sfs); i++ {
		// A connection the last read caught before its addresses were
		// set (0.0.0.0:0 while connecting) is read again.
		c, ok := last[sfs[i].Token]
		reuse = ok && !c.Remote.Addr().IsUnspecified()
	}
	if reuse {
		return last
	}
	conns := map[uint32]observe.Conn{}
	if cs, err := d.sampler.Conns(); err == nil {
		for _, c := range cs {
			conns[c.Token] = c
		}
	}
	d.mu.Lock()
	d.connsAt = time.Now()
	d.mu.Unlock()
	return conns
}
