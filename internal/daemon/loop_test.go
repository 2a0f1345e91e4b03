package daemon

import (
	"context"
	"errors"
	"net/netip"
	"sync"
	"testing"
	"time"

	"mpsteer/internal/actuator"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// countingPM is a path manager that only counts what is asked of it.
type countingPM struct {
	mu    sync.Mutex
	calls int
}

func (c *countingPM) count() { c.mu.Lock(); c.calls++; c.mu.Unlock() }
func (c *countingPM) n() int { c.mu.Lock(); defer c.mu.Unlock(); return c.calls }

func (c *countingPM) Endpoints() ([]pm.Endpoint, error)              { c.count(); return nil, nil }
func (c *countingPM) AddEndpoint(e pm.Endpoint) (pm.Endpoint, error) { c.count(); return e, nil }
func (c *countingPM) SetEndpointFlags(pm.Endpoint) error             { c.count(); return nil }
func (c *countingPM) DelEndpoint(pm.Endpoint) error                  { c.count(); return nil }
func (c *countingPM) SetSubflowFlags(uint32, netip.AddrPort, netip.AddrPort, pm.Flags) error {
	c.count()
	return nil
}
func (c *countingPM) SubflowCreate(uint32, pm.Endpoint, netip.AddrPort) error { c.count(); return nil }
func (c *countingPM) SubflowDestroy(uint32, netip.AddrPort, netip.AddrPort) error {
	c.count()
	return nil
}
func (c *countingPM) Announce(uint32, pm.Endpoint) error { c.count(); return nil }
func (c *countingPM) Limits() (pm.Limits, error)         { return pm.Limits{}, nil }
func (c *countingPM) Remove(uint32, uint8) error         { c.count(); return nil }

// loopDaemon is a daemon without a kernel whose policy makes every
// subflow from 10.2.0.1 backup, with per-subflow flags on k.
func loopDaemon(t *testing.T, k actuator.PM) *Daemon {
	t.Helper()
	d := testDaemon(t, "/c.yaml", "backup_via: subflow\npolicies: [{name: backup, paths: [10.2.0.1]}]\n")
	d.tracker, d.scope = observe.NewTracker(), newAppScope()
	d.apply.flags = actuator.NewSubflowFlags(k, d.apply.Gate)
	d.apply.Flags = d.apply.flags
	d.apply.backupVia = "subflow"
	return d
}

func joined(port uint16) pm.Event {
	return pm.Event{Type: pm.EventSubEstablished, Token: 7, Local: netip.AddrPortFrom(netip.MustParseAddr("10.2.0.1"), port),
		Remote: netip.MustParseAddrPort("10.9.0.2:5201"), Received: time.Now()}
}

// An event makes the loop decide and apply at once.
func TestAnEventIsAppliedByTheLoop(t *testing.T) {
	k := &countingPM{}
	d := loopDaemon(t, k)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { d.runLoop(ctx); close(done) }()
	d.in.mark(func(in *inbox) { in.events = append(in.events, joined(40001)) })
	deadline := time.Now().Add(5 * time.Second)
	for k.n() == 0 && time.Now().Before(deadline) {
		d.in.mark(func(in *inbox) {}) // wake it again: the test waits on the count
		<-time.After(time.Millisecond)
	}
	cancel()
	<-done
	if k.n() != 1 {
		t.Fatalf("%d path-manager calls, want the one that makes the joined subflow backup", k.n())
	}
}

// Defect 1 of the reconciler issue: on a clean exit, events still queued
// were decided and applied after the daemon had restored the flags, and
// under backup_via subflow nothing undid them. A stopped loop applies
// nothing, whatever is marked, however the wake-up and the stop race.
func TestAStoppedLoopAppliesNothing(t *testing.T) {
	for i := 0; i < 200; i++ {
		k := &countingPM{}
		d := loopDaemon(t, k)
		ctx, cancel := context.WithCancel(context.Background())
		d.in.mark(func(in *inbox) { in.events = append(in.events, joined(uint16(40000+i))) })
		cancel() // both the wake-up and the stop are ready
		d.runLoop(ctx)
		if k.n() != 0 {
			t.Fatalf("try %d: a stopped loop made %d path-manager calls", i, k.n())
		}
		if !d.loop.stopped {
			t.Fatal("the loop does not say it stopped")
		}
	}
}

// eventsAndError is a source whose one read decodes events and fails on
// another message, then closes.
type eventsAndError struct{ reads int }

func (s *eventsAndError) Receive() ([]pm.Event, error) {
	s.reads++
	if s.reads == 1 {
		return []pm.Event{joined(40001), joined(40002)}, errors.New("decode: attribute 9 of event 10 is short")
	}
	return nil, errors.New("use of closed network connection")
}

// Defect 3 of the reconciler issue: a read that decoded events together
// with an error was discarded whole. The events it decoded reach the loop.
func TestEventsDecodedBesideAnErrorAreKept(t *testing.T) {
	d := testDaemon(t, "/c.yaml", "policies: []\n")
	d.tracker = observe.NewTracker()
	d.readEvents(context.Background(), &eventsAndError{})
	got := d.in.take()
	if len(got.events) != 2 {
		t.Fatalf("%d events reached the loop, want the 2 decoded beside the error", len(got.events))
	}
}

// Reopen wishes go to the flag actuator, the other lifecycle actions to
// the lifecycle actuator, in their order.
func TestSplitReopen(t *testing.T) {
	c := policy.Action{Kind: policy.Create, Token: 1}
	r1, r2 := policy.Action{Kind: policy.Reopen, Token: 2}, policy.Action{Kind: policy.Reopen, Token: 3}
	d := policy.Action{Kind: policy.Destroy, Token: 4}
	reopen, rest := splitReopen([]policy.Action{c, r1, d, r2})
	if len(reopen) != 2 || reopen[0].Token != 2 || reopen[1].Token != 3 || len(rest) != 2 || rest[0].Token != 1 || rest[1].Token != 4 {
		t.Fatalf("reopen %v, rest %v", reopen, rest)
	}
	if reopen, rest := splitReopen([]policy.Action{c, d}); reopen != nil || len(rest) != 2 {
		t.Fatalf("none: reopen %v, rest %v", reopen, rest)
	}
}
