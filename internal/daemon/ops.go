package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/metrics"
	"mpsteer/internal/monitor"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// ops is what makes the daemon operable: Prometheus metrics
// (internal/metrics), the monitor stream (internal/monitor), systemd's
// readiness protocol and watchdog, and the config file watcher
// (watch.go). Every method is safe on a nil *ops (a Daemon built by a
// unit test has none).
type ops struct {
	d       *Daemon
	opts    Options
	metrics *metrics.Metrics
	hub     *monitor.Hub

	mu sync.Mutex
	// decisions are the verdicts last told to monitors, per subflow.
	decisions   map[policy.SubflowID]string
	watchdog    time.Duration
	lastPing    time.Time
	stopWatch   func()
	stopMetrics func()
}

func newOps(d *Daemon, o Options) *ops {
	op := &ops{d: d, opts: o, hub: monitor.NewHub(), decisions: map[policy.SubflowID]string{}}
	op.metrics = metrics.New(metricsSource{d}, op.hub, o.MetricsSubflows)
	if iv, err := sdnotify.SdWatchdogEnabled(false); err == nil && iv > 0 {
		op.watchdog = iv
	}
	return op
}

// metricsSource is the daemon as the metrics read it.
type metricsSource struct{ d *Daemon }

func (s metricsSource) MetricsView() metrics.View {
	d := s.d
	d.mu.Lock()
	defer d.mu.Unlock()
	v := metrics.View{Version: d.opts.Version, Interval: d.cfg.Interval, Subflows: append([]observe.Subflow(nil), d.view.subflows...),
		Conns: len(d.view.conns), Outcomes: len(d.outcomes), Reactions: append([]time.Duration(nil), d.loop.reactions...)}
	for _, p := range d.engine.Policies {
		v.Policies = append(v.Policies, p.Name())
	}
	for _, a := range d.lastPlan.Backup {
		v.Backup = append(v.Backup, a)
	}
	for _, a := range d.lastPlan.Limits {
		v.Limits = append(v.Limits, a)
	}
	return v
}

// Chains reads the datapath's chains without the daemon's lock: the
// manager has its own, which a slow compile must not make the daemon's
// wait on.
func (s metricsSource) Chains() []*datapath.ChainStatus {
	d := s.d
	d.mu.Lock()
	dp := d.dp
	d.mu.Unlock()
	if dp == nil {
		return nil
	}
	return dp.List()
}

// notify tells systemd (when it started the daemon with NOTIFY_SOCKET).
func notify(state string) {
	sdnotify.SdNotify(false, state)
}

func monotonicUsec() int64 {
	var ts unix.Timespec
	if unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts) != nil {
		return 0
	}
	return ts.Nano() / 1000
}

// start listens for metrics: before anything is changed, so that a busy
// address fails the start cleanly.
func (op *ops) start() error {
	if op == nil || op.opts.MetricsAddr == "" {
		return nil
	}
	stop, err := op.metrics.Serve(op.opts.MetricsAddr, op.d.log)
	if err != nil {
		return err
	}
	op.stopMetrics = stop
	return nil
}

// started runs once the daemon is up: the config watcher starts and
// systemd hears that the daemon is ready.
func (op *ops) started(ctx context.Context) {
	if op == nil {
		return
	}
	for _, w := range capabilityWarnings() {
		op.d.log.Printf("warning: %s", w)
	}
	if !op.opts.NoWatch {
		op.stopWatch = op.d.watchConfig(ctx)
	}
	notify("READY=1\nSTATUS=" + op.statusLine())
}

func (op *ops) statusLine() string {
	d := op.d
	d.mu.Lock()
	defer d.mu.Unlock()
	var names []string
	for _, p := range d.engine.Policies {
		names = append(names, p.Name())
	}
	s := fmt.Sprintf("%d polic%s %v, %s path manager, config %s", len(names), plural(len(names), "y", "ies"), names, d.pmMode, d.cfg.File)
	if op.opts.MetricsAddr != "" {
		s += ", metrics on " + op.opts.MetricsAddr
	}
	return s
}

// stopping is said when the daemon begins to undo its changes.
func (op *ops) stopping() {
	if op == nil {
		return
	}
	notify("STOPPING=1\nSTATUS=stopping: undoing changes")
}

// close stops what start and started began.
func (op *ops) close() {
	if op == nil {
		return
	}
	if op.stopWatch != nil {
		op.stopWatch()
	}
	if op.stopMetrics != nil {
		op.stopMetrics()
	}
	op.hub.Close()
}

// recorded sees every action record.
func (op *ops) recorded(acts []api.ActionRecord) {
	if op == nil {
		return
	}
	for i := range acts {
		a := acts[i]
		op.metrics.Action(a)
		op.hub.Publish(api.MonitorEvent{At: a.At, Type: api.MonitorAction, Action: &a})
	}
}

// event sees every path-manager event.
func (op *ops) event(ev pm.Event) {
	if op == nil {
		return
	}
	op.metrics.Event(ev)
	if !op.hub.Active() {
		return
	}
	me := api.MonitorEvent{At: time.Now(), Type: api.MonitorPM, Event: ev.Type.String(), Token: fmt.Sprintf("%08x", ev.Token),
		ServerSide: ev.ServerSide, Errno: ev.Error, ResetReason: ev.ResetReason}
	if ev.Local.IsValid() {
		me.Local = ev.Local.String()
	}
	if ev.Remote.IsValid() {
		me.Remote = ev.Remote.String()
	}
	switch ev.Type {
	case pm.EventSubEstablished, pm.EventSubClosed, pm.EventSubPriority, pm.EventEstablished, pm.EventCreated:
		lid, rid, b := ev.LocalID, ev.RemoteID, ev.Backup
		me.LocalID, me.RemoteID, me.Backup = &lid, &rid, &b
	case pm.EventAnnounced, pm.EventRemoved:
		rid := ev.RemoteID
		me.RemoteID = &rid
	}
	op.hub.Publish(me)
}

// sampleError counts a failed sample.
func (op *ops) sampleError() {
	if op == nil {
		return
	}
	op.metrics.SampleError()
	op.metrics.Round(time.Now(), time.Now(), true)
}

// roundDone ends a sample round that began at start (under the daemon's
// mu): its time, the decisions that changed (for monitors), and systemd's
// watchdog.
func (op *ops) roundDone(start time.Time) {
	if op == nil {
		return
	}
	now := time.Now()
	op.mu.Lock()
	ping := op.watchdog > 0 && now.Sub(op.lastPing) >= op.watchdog/4
	if ping {
		op.lastPing = now
	}
	op.mu.Unlock()
	op.metrics.Round(start, now, false)
	if ping {
		notify("WATCHDOG=1")
	}
	if op.hub.Active() {
		op.diffDecisions(now, op.d.lastPlan)
	} else {
		op.mu.Lock()
		clear(op.decisions)
		op.mu.Unlock()
	}
}

// diffDecisions tells monitors which subflows' verdicts changed since
// the last round.
func (op *ops) diffDecisions(now time.Time, plan policy.Plan) {
	type verdict struct{ policy, text, reason string }
	cur := map[policy.SubflowID]verdict{}
	for sid, a := range plan.Backup {
		v := "active"
		if a.Backup {
			v = "backup"
		}
		cur[sid] = verdict{a.Policy, v, a.Reason}
	}
	for sid, a := range plan.Limits {
		v := cur[sid]
		text := "capped " + a.Rate.String()
		if a.Rate <= 0 {
			text = "uncapped"
		}
		if v.text != "" {
			text = v.text + ", " + text
		}
		cur[sid] = verdict{a.Policy, text, a.Reason}
	}
	op.mu.Lock()
	defer op.mu.Unlock()
	for sid, v := range cur {
		key := v.policy + " " + v.text
		if op.decisions[sid] == key {
			continue
		}
		op.decisions[sid] = key
		op.hub.Publish(api.MonitorEvent{At: now, Type: api.MonitorDecision, Policy: v.policy, Subflow: sid.String(), Decision: v.text, Reason: v.reason})
	}
	for sid := range op.decisions {
		if _, ok := cur[sid]; !ok {
			delete(op.decisions, sid)
			op.hub.Publish(api.MonitorEvent{At: now, Type: api.MonitorDecision, Subflow: sid.String(), Decision: "none", Reason: "no policy has an opinion on it (or it is gone)"})
		}
	}
}

// reloading tells systemd a reload begins.
func (op *ops) reloading() {
	notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
}

// reloaded sees the outcome of every reload, whatever asked for it.
func (op *ops) reloaded(trigger, msg string, err error) {
	if op == nil {
		return
	}
	ok := err == nil
	if !ok {
		msg = err.Error()
	}
	op.metrics.Reload(trigger, ok)
	op.hub.Publish(api.MonitorEvent{At: time.Now(), Type: api.MonitorReload, Trigger: trigger, Applied: &ok, Message: msg})
	notify("READY=1\nSTATUS=" + op.statusLine())
}
