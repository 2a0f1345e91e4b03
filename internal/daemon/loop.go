package daemon

import (
	"context"
	"sync"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// The reconcile loop. Producers (the sampler, the event reader, the
// health poller, the interface watcher, reloads and hints) only mark the
// inbox and wake the loop; the loop takes everything marked at once and
// runs one round: it brings the view up to date, the policies decide over
// every connection, and the applier makes the kernel match what they want
// (actuators.go). Nothing else applies anything, and once the loop has
// returned nothing is applied until the daemon has undone its changes.

// Triggers counted in the loop's status.
const (
	trigSample = "sample"
	trigEvent  = "event"
	trigHealth = "health"
	trigIface  = "interface"
	trigConfig = "config"
	trigLook   = "look"
)

// sample is one read of the namespace's subflows and connections.
type sample struct {
	start, end time.Time
	subflows   []observe.Subflow
	err        error // the subflows could not be read
	// conns are the connections (nil with connsErr: unknown, not gone);
	// reused: the sampler kept the last read (quiet.go).
	conns    map[uint32]observe.Conn
	connsErr error
}

// inbox is what happened since the loop last looked.
type inbox struct {
	mu   sync.Mutex
	wake chan struct{}
	// sample is the newest sample not yet taken (an older one is
	// superseded); spare is an array the iterator may fill next.
	sample *sample
	spare  []observe.Subflow
	events []pm.Event
	// reports: a peer's path-health report changed (the poller keeps
	// them all, health.go).
	reports bool
	iface   bool
	// all: the policies or the config changed: decide every connection.
	all bool
	// look: an actuator asked to look again (recheck) without a sample.
	look bool
	// wantSample asks the sampler for a sample before its next tick,
	// wantSampleNow for one at once (a join completed, joinwatch.go);
	// healthWake tells the health poller to look at its work again.
	wantSample    chan struct{}
	wantSampleNow chan struct{}
	healthWake    chan struct{}
	// newInterval tells the sampler the config's interval changed.
	newInterval chan struct{}
}

func newInbox() *inbox {
	return &inbox{wake: make(chan struct{}, 1), wantSample: make(chan struct{}, 1), wantSampleNow: make(chan struct{}, 1),
		healthWake: make(chan struct{}, 1), newInterval: make(chan struct{}, 1)}
}

// mark runs f on the inbox and wakes the loop.
func (in *inbox) mark(f func(in *inbox)) {
	in.mu.Lock()
	f(in)
	in.mu.Unlock()
	select {
	case in.wake <- struct{}{}:
	default: // a wake-up is pending: it takes this too
	}
}

// requestSample asks the sampler for a sample soon (it spaces them).
func (in *inbox) requestSample() {
	select {
	case in.wantSample <- struct{}{}:
	default:
	}
}

// sampleNow asks the sampler for a sample at once (it spaces them only
// by their cost).
func (in *inbox) sampleNow() {
	select {
	case in.wantSampleNow <- struct{}{}:
	default:
	}
}

// intervalChanged tells the sampler to read the interval again.
func (in *inbox) intervalChanged() {
	select {
	case in.newInterval <- struct{}{}:
	default:
	}
}

// taken is what one round takes from the inbox.
type taken struct {
	sample  *sample
	events  []pm.Event
	reports bool
	iface   bool
	all     bool
	look    bool
}

func (in *inbox) take() taken {
	in.mu.Lock()
	defer in.mu.Unlock()
	t := taken{sample: in.sample, events: in.events, reports: in.reports, iface: in.iface, all: in.all, look: in.look}
	in.sample, in.events, in.reports, in.iface, in.all, in.look = nil, nil, false, false, false, false
	return t
}

// giveSpare hands the iterator an array that is no one's now.
func (in *inbox) giveSpare(a []observe.Subflow) {
	in.mu.Lock()
	in.spare = a[:0]
	in.mu.Unlock()
}

func (in *inbox) takeSpare() []observe.Subflow {
	in.mu.Lock()
	defer in.mu.Unlock()
	s := in.spare
	in.spare = nil
	return s
}

// loopStats is the loop's own state, for status.
type loopStats struct {
	rounds   uint64
	triggers map[string]uint64
	stopped  bool
	// reactions: from a path-manager event received to the actions it
	// caused applied (the last 10000).
	reactions []time.Duration
}

func (s *loopStats) count(trigger string) {
	if s.triggers == nil {
		s.triggers = map[string]uint64{}
	}
	s.triggers[trigger]++
}

// runLoop runs rounds until ctx ends.
func (d *Daemon) runLoop(ctx context.Context) {
	stop := func() {
		d.mu.Lock()
		d.loop.stopped = true
		d.mu.Unlock()
	}
	for {
		select {
		case <-ctx.Done():
			stop()
			return
		case <-d.in.wake:
		}
		// Both may be ready and select picks either: a stopped loop runs
		// no round, whatever is marked.
		if ctx.Err() != nil {
			stop()
			return
		}
		d.round(d.in.take())
	}
}

// round brings the view up to date with what was taken, decides and
// applies.
func (d *Daemon) round(t taken) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.loop.rounds++
	sampled := false
	if s := t.sample; s != nil {
		d.loop.count(trigSample)
		if s.err != nil {
			d.log.Printf("sample: %v", s.err)
			d.ops.sampleError()
		} else {
			if old := d.view.adopt(s, d.tracker); cap(old) > 0 && d.iter != nil {
				d.in.giveSpare(old)
			}
			sampled = true
		}
	}
	var firstEvent time.Time
	touched := false
	for _, ev := range t.events {
		if !d.view.track(ev) {
			continue
		}
		if !touched {
			d.loop.count(trigEvent)
		}
		touched = true
		if firstEvent.IsZero() || ev.Received.Before(firstEvent) {
			firstEvent = ev.Received
		}
		if ev.Type == pm.EventSubEstablished && (d.apply.joins.Backup || d.sampleOnJoin) {
			// A subflow joined as backup waits for the sample that
			// gives its RTT before it may carry anything; prefer holds
			// the other paths back while a preferred join completes.
			d.in.requestSample()
		}
		d.refreshConn(ev.Token) // a new connection's cgroup (appscope.go)
	}
	if t.reports && d.health != nil {
		d.loop.count(trigHealth)
	}
	if t.iface {
		d.loop.count(trigIface)
		ifaces.invalidate()
		// Every connection decided again, idle ones too: a path that went
		// or came changes what they should use.
		d.quiet.forget()
	}
	if t.all {
		d.loop.count(trigConfig)
		d.quiet.forget()
	}
	if t.look {
		d.loop.count(trigLook)
	}
	if !sampled && !touched && !t.reports && !t.iface && !t.all && !t.look {
		return // a failed sample, or events about nothing the policies hear of
	}
	now := time.Now()
	if sampled {
		ifaces.invalidate() // interfaces as they are now (hostenv.go)
		d.checkWorld(now)
		d.scope.sync() // a service's cgroup that came or went (appscope.go)
	}
	d.followConfig()
	snap := d.snapshot(now, d.view.subflows, d.view.conns, &d.snapBuf)
	snap.Sampled = d.view.sampledAt
	plan, apply := d.decide(snap)
	reopen, lifecycle := splitReopen(plan.Lifecycle)
	if d.apply.newReopen(reopen) {
		// The fresh subflows a re-added endpoint makes are probes: their
		// SYN timeout must be in the sockops map before they are opened.
		d.syncRequirements()
	}
	var est []observe.Subflow
	if apply || len(reopen) > 0 || d.apply.reopening {
		est = established(d.view.subflows)
	}
	if apply {
		recs := d.apply.apply(plan, est, sampled, now)
		if d.apply.flags.Recheck() {
			// An MP_PRIO still has to reach a joining subflow, or an
			// address was made usable: look again in 20 ms (the next tick
			// would leave a just-joined subflow idle for an interval).
			time.AfterFunc(20*time.Millisecond, d.in.requestSample)
		}
		// And the joining ones are watched: sampled again as soon as
		// their join completes (joinwatch.go).
		d.joins.add(d.apply.flags.Joining(), d.view.sampledAt)
		if len(recs) > 0 || d.apply.flags.Recheck() {
			// Acted, or an MP_PRIO still has to reach a joining subflow:
			// the next round looks again (quiet.go).
			d.quiet.dirty = true
		}
		if len(recs) > 0 && !firstEvent.IsZero() {
			d.loop.reactions = append(d.loop.reactions, time.Since(firstEvent))
			if n := len(d.loop.reactions); n > 10000 {
				d.loop.reactions = d.loop.reactions[n-10000:]
			}
		}
		d.records.add(d, recs...)
	}
	if len(reopen) > 0 || d.apply.reopening {
		// Every round, decided or quiet: re-adds are paced by time.
		recs := d.apply.flags.Reopen(reopen, est, joining(d.view.subflows), now)
		d.apply.reopening = len(reopen) > 0 || d.apply.flags.ReopenPending()
		if len(recs) > 0 {
			d.quiet.dirty = true
			d.records.add(d, recs...)
		}
		if due := d.apply.flags.ReopenDue(); !due.IsZero() && d.apply.reopening {
			d.lookAt(due)
		}
	}
	d.applyLifecycle(lifecycle, snap, now)
	if sampled || t.all || t.iface {
		d.syncRequirements()
	}
	if sampled {
		d.forgetGone(now)
	}
	d.publishEstablished()
	if sampled {
		d.ops.roundDone(t.sample.start) // from the read that began it
	}
}

// decide runs the policies over the snapshot. With policies that let quiet
// connections be (quiet.go), idle, unchanged connections keep their last
// decisions, and while no decision changes the applier is not asked
// again (apply false).
func (d *Daemon) decide(snap *policy.Snapshot) (policy.Plan, bool) {
	// The plan before last is filled again: its maps are no one's now.
	plan := d.sparePlan
	if !d.engine.QuietAware() {
		d.quiet.forget()
		d.engine.DecideInto(snap, &plan)
		d.sparePlan, d.lastPlan = d.lastPlan, plan
		return plan, true
	}
	round := d.quiet.split(snap)
	d.engine.DecideInto(round, &d.freshPlan)
	plan.Lifecycle = d.freshPlan.Lifecycle
	if !d.quiet.keep(&d.freshPlan, round) {
		return plan, false
	}
	d.quiet.merge(&plan, &d.freshPlan, round)
	d.sparePlan, d.lastPlan = d.lastPlan, plan
	return plan, true
}

// lookAt has the loop run a round at t (without a sample): the re-adds
// of endpoints are paced finer than the sampling interval. One timer: an
// earlier look pending covers a later one.
func (d *Daemon) lookAt(t time.Time) {
	if !d.lookPending.IsZero() && !d.lookPending.After(t) && time.Now().Before(d.lookPending) {
		return
	}
	d.lookPending = t
	time.AfterFunc(time.Until(t), func() { d.in.mark(func(in *inbox) { in.look = true }) })
}

// splitReopen takes the Reopen wishes out of a plan's lifecycle actions:
// the flag actuator carries them out (they act on endpoints), paced by
// time rather than once per wish.
func splitReopen(acts []policy.Action) (reopen, rest []policy.Action) {
	for i, a := range acts {
		if a.Kind == policy.Reopen {
			if reopen == nil {
				rest = append(rest, acts[:i]...)
			}
			reopen = append(reopen, a)
			continue
		}
		if reopen != nil {
			rest = append(rest, a)
		}
	}
	if reopen == nil {
		return nil, acts
	}
	return reopen, rest
}

// forgetGone forgets what belongs to connections that are gone: only
// when the connections were read (a failed read is unknown, not gone).
func (d *Daemon) forgetGone(now time.Time) {
	if !d.view.connsKnown {
		return
	}
	live := func(tok uint32) bool { _, ok := d.view.conns[tok]; return ok }
	d.tracker.Prune(live, now.Add(-10*time.Second))
	d.apply.life.Forget(live)
	d.records.forget(live)
}

// loopStatus is the loop's part of status.
func (d *Daemon) loopStatus() *api.LoopStatus {
	st := &api.LoopStatus{Rounds: d.loop.rounds, Triggers: map[string]uint64{}, Stopped: d.loop.stopped,
		ConnsUnknown: !d.view.connsKnown && d.view.connsErr != ""}
	for k, v := range d.loop.triggers {
		st.Triggers[k] = v
	}
	if d.health != nil {
		st.HealthPolls = d.health.polls.Load()
	}
	return st
}
