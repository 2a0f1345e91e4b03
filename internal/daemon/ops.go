package daemon

import (
	"context"
	"fmt"
	"sync"
	"time"

	sdnotify "github.com/coreos/go-systemd/v22/daemon"
	"golang.org/x/sys/unix"

	"mpsteer/internal/api"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// ops is what makes the daemon operable: Prometheus metrics
// (metrics.go), the monitor stream (monitor.go), systemd's readiness
// protocol and watchdog (here), and the config file watcher (watch.go).
// Every method is safe on a nil *ops (a Daemon built by a unit test has
// none).
type ops struct {
	d       *Daemon
	opts    Options
	metrics *metrics
	hub     *monitorHub

	mu sync.Mutex
	// decisions are the verdicts last told to monitors, per subflow.
	decisions map[policy.SubflowID]string
	// sampleFailed: the current round's sample failed.
	sampleFailed bool
	watchdog     time.Duration
	lastPing     time.Time
	stopWatch    func()
	stopMetrics  func()
}

func newOps(d *Daemon, o Options) *ops {
	op := &ops{d: d, opts: o, hub: newMonitorHub(), decisions: map[policy.SubflowID]string{}}
	op.metrics = newMetrics(d, op.hub)
	op.metrics.subflowSeries = o.MetricsSubflows
	if iv, err := sdnotify.SdWatchdogEnabled(false); err == nil && iv > 0 {
		op.watchdog = iv
	}
	return op
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
	stop, err := op.metrics.serve(op.opts.MetricsAddr, op.d.log)
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
	op.hub.close()
}

// recorded sees every action record.
func (op *ops) recorded(acts []api.ActionRecord) {
	if op == nil {
		return
	}
	for i := range acts {
		a := acts[i]
		op.metrics.action(a)
		op.hub.publish(api.MonitorEvent{At: a.At, Type: api.MonitorAction, Action: &a})
	}
}

// event sees every path-manager event.
func (op *ops) event(ev pm.Event) {
	if op == nil {
		return
	}
	op.metrics.event(ev)
	if !op.hub.active() {
		return
	}
	at := time.Now()
	me := api.MonitorEvent{At: at, Type: api.MonitorPM, Event: ev.Type.String(), Token: fmt.Sprintf("%08x", ev.Token),
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
	op.hub.publish(me)
}

// sampleError counts a failed sample (the round ends early).
func (op *ops) sampleError() {
	if op == nil {
		return
	}
	op.mu.Lock()
	op.sampleFailed = true
	op.mu.Unlock()
	op.metrics.sampleErrors.Inc()
}

// roundDone ends a sampling round that began at start: its time, the
// decisions that changed (for monitors), and systemd's watchdog.
func (op *ops) roundDone(start time.Time) {
	if op == nil {
		return
	}
	now := time.Now()
	op.mu.Lock()
	failed := op.sampleFailed
	op.sampleFailed = false
	ping := op.watchdog > 0 && now.Sub(op.lastPing) >= op.watchdog/4
	if ping {
		op.lastPing = now
	}
	op.mu.Unlock()
	op.metrics.round(start, now, failed)
	if ping {
		notify("WATCHDOG=1")
	}
	if !failed && op.hub.active() {
		op.diffDecisions(now)
	} else if !op.hub.active() {
		op.mu.Lock()
		clear(op.decisions)
		op.mu.Unlock()
	}
}

// diffDecisions tells monitors which subflows' verdicts changed since
// the last round.
func (op *ops) diffDecisions(now time.Time) {
	d := op.d
	type verdict struct{ policy, text, reason string }
	cur := map[policy.SubflowID]verdict{}
	d.mu.Lock()
	for sid, a := range d.lastPlan.Backup {
		v := "active"
		if a.Backup {
			v = "backup"
		}
		cur[sid] = verdict{a.Policy, v, a.Reason}
	}
	for sid, a := range d.lastPlan.Limits {
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
	d.mu.Unlock()
	op.mu.Lock()
	defer op.mu.Unlock()
	for sid, v := range cur {
		key := v.policy + " " + v.text
		if op.decisions[sid] == key {
			continue
		}
		op.decisions[sid] = key
		op.hub.publish(api.MonitorEvent{At: now, Type: api.MonitorDecision, Policy: v.policy, Subflow: sid.String(), Decision: v.text, Reason: v.reason})
	}
	for sid := range op.decisions {
		if _, ok := cur[sid]; !ok {
			delete(op.decisions, sid)
			op.hub.publish(api.MonitorEvent{At: now, Type: api.MonitorDecision, Subflow: sid.String(), Decision: "none", Reason: "no policy has an opinion on it (or it is gone)"})
		}
	}
}

// reloadConfig reloads the file the daemon runs now (--config, or the
// last one `policy apply` sent): what SIGHUP and a change of the file both
// do. A config that is wrong is refused and logged; the old one stays.
func (d *Daemon) reloadConfig(trigger string) {
	d.mu.Lock()
	file := d.cfg.File
	d.mu.Unlock()
	notify(fmt.Sprintf("RELOADING=1\nMONOTONIC_USEC=%d", monotonicUsec()))
	msg, err := d.reload(file, nil)
	if err != nil {
		d.log.Printf("%s: config not applied, the old one stays: %v", trigger, err)
	} else {
		d.log.Printf("%s: %s", trigger, msg)
	}
	d.ops.reloaded(trigger, msg, err)
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
	op.metrics.reload(trigger, ok)
	op.hub.publish(api.MonitorEvent{At: time.Now(), Type: api.MonitorReload, Trigger: trigger, Applied: &ok, Message: msg})
	notify("READY=1\nSTATUS=" + op.statusLine())
}
