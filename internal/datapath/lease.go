package datapath

import (
	"fmt"
	"time"

	"golang.org/x/sys/unix"
)

// The lease of chains on a tc clsact qdisc (mpsteer_alive in
// chain.bpf.c). A TCX link goes with the process that made it; a tc
// filter stays on its device. So that a manager that dies (SIGKILL, a
// crash) leaves MPTCP working there too, its chains act only until a
// deadline the manager keeps moving on: LeaseTTL ahead, every
// leaseRenew. When the manager is gone the deadline passes and every one
// of its chains passes every packet untouched (until a next manager on
// that device removes its filters). Chains attached with TCX hold no
// lease (the deadline stays 0).
const (
	LeaseTTL   = 3 * time.Second
	leaseRenew = 500 * time.Millisecond
)

// lease is the goroutine that moves the deadline on.
type lease struct {
	stop, done chan struct{}
	failures   int // renewals that failed (the last error in err)
	err        error
}

// monotonicNs is CLOCK_MONOTONIC, the clock of bpf_ktime_get_ns.
func monotonicNs() (uint64, error) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0, err
	}
	return uint64(ts.Nano()), nil
}

func (m *Manager) renewLease() error {
	now, err := monotonicNs()
	if err != nil {
		return err
	}
	return m.objs.MpsteerAlive.Put(uint32(0), now+uint64(LeaseTTL))
}

// holdLease starts the lease if it is not held (with m.mu held): the
// deadline is written before the first clsact filter goes on.
func (m *Manager) holdLease() error {
	if m.lease != nil {
		return nil
	}
	if err := m.renewLease(); err != nil {
		return fmt.Errorf("the chains' lease (fail open on tc): %w", err)
	}
	l := &lease{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(l.done)
		t := time.NewTicker(leaseRenew)
		defer t.Stop()
		for {
			select {
			case <-l.stop:
				return
			case <-t.C:
				if err := m.renewLease(); err != nil {
					m.mu.Lock()
					l.failures, l.err = l.failures+1, err
					m.mu.Unlock()
				}
			}
		}
	}()
	m.lease = l
	return nil
}

// endLease stops moving the deadline on (Close, once no chain acts).
// Without m.mu held: the goroutine may be waiting for it.
func (m *Manager) endLease() {
	m.mu.Lock()
	l := m.lease
	m.lease = nil
	m.mu.Unlock()
	if l == nil {
		return
	}
	close(l.stop)
	<-l.done
}
