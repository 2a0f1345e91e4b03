package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/bpfutil"
	"mpsteer/internal/datapath"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/observe/subflowiter"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
	"mpsteer/internal/sockops"
)

// Options tune Run.
type Options struct {
	ConfigFile string
	Socket     string
	StateDir   string // default /run/mpsteer
	Log        io.Writer
	// MetricsAddr serves Prometheus metrics at /metrics (metrics.go).
	MetricsAddr string
	// MetricsSubflows: at most this many established subflows get
	// per-subflow series; negative: every one.
	MetricsSubflows int
	// NoWatch: do not reload the config when its file changes (watch.go).
	NoWatch bool
	// Sampler: how subflows are read (sample.go): SamplerAuto (default),
	// SamplerIterator or SamplerDiag.
	Sampler string
}

// Daemon is one running instance (one per network namespace).
type Daemon struct {
	opts Options
	log  *log.Logger

	mu        sync.Mutex
	cfg       *Config
	engine    *policy.Engine
	hint      []string
	hintOwned bool // the prefer policy exists only because of the hint
	// intervalChanged wakes the main loop to re-read cfg.Interval; a send
	// never blocks (one pending wake-up is enough).
	intervalChanged chan struct{}
	// sampleNow wakes the main loop for a sample before the next tick: a
	// subflow joined as backup (policy.Requirements.JoinBackup) waits
	// for the sample that gives its RTT before it may carry anything.
	sampleNow chan struct{}
	// joinBackup: a policy wants subflows to join as backup (the last
	// requirements synced; the event path must not ask the policies,
	// which may resolve interfaces).
	joinBackup bool

	pmc     *pm.Client
	sampler *observe.Sampler
	// iter reads the subflows when it loaded (sample.go); nil: sampler.
	iter    *subflowiter.Sampler
	tracker *observe.Tracker
	act     backupActuator
	rates   *rateActuator
	life    *lifecycleActuator
	pmMode  string
	rto     *sockops.RTOCapper
	rtoErr  string
	// initial is avoid_initial's connect4 program (initial.go).
	initial    *sockops.InitialBinder
	initialErr string
	dp         *datapath.Manager
	// configChains are the chains the config declared, as attached.
	configChains []configChain
	cookie       uint64
	netns        string
	// spread is the spread policy's datapath, when installed (spread.go).
	spread *spreadState
	// health is the path-health reports' program and source (health.go).
	health *healthState
	// scope: cgroups of connections, and the mptcpize program (appscope.go).
	scope *appScope
	// ops: metrics, monitor stream, systemd notification, config watch
	// (ops.go); nil in unit tests.
	ops *ops

	// What the last round saw and decided.
	lastSubflows []observe.Subflow // every state
	// spareSubflows: the array of the sample before last, for the next.
	spareSubflows []observe.Subflow
	// snapBuf: the array tick's snapshots hold their subflows in, reused.
	snapBuf     []observe.Subflow
	lastConns   map[uint32]observe.Conn
	lastSampled time.Time // when lastSubflows were sampled
	connsAt     time.Time // when lastConns were sampled
	lastPlan    policy.Plan
	sparePlan   policy.Plan // the one before: its maps are reused (tick)
	freshPlan   policy.Plan // a quiet-aware round's own decisions (quiet.go)
	// outcomes of the lifecycle actions since the last snapshot: the next
	// one carries them to the policies.
	outcomes    []policy.Outcome
	actions     []api.ActionRecord            // recent, all kinds
	connActions map[uint32][]api.ActionRecord // recent lifecycle actions per connection
	warned      map[string]bool               // unsupported actions already logged
	// What the namespace's MPTCP sysctls said at the last look (world.go).
	mptcpEnabled   string
	lastWorldCheck time.Time
	// refusedLogged: refusals already logged, by policy, kind and target,
	// with the kernel's reason (refusals.go).
	refusedLogged map[string]string
	reactions     []time.Duration
	// quiet: what each connection looked like when last decided (quiet.go).
	quiet quietConns
	// reactedAt: when the last batch of path-manager events was decided.
	reactedAt time.Time
}

// LoadConfig reads and validates a config file.
func LoadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseConfig(file, data, hostEnv())
}

// Run starts the daemon and blocks until ctx ends; then it undoes what it
// changed.
func Run(ctx context.Context, o Options) error {
	if o.Socket == "" {
		o.Socket = api.DefaultSocket()
	}
	if o.StateDir == "" {
		o.StateDir = "/run/mpsteer"
	}
	if o.Log == nil {
		o.Log = os.Stderr
	}
	cfg, err := LoadConfig(o.ConfigFile)
	if err != nil {
		return err
	}
	d := &Daemon{opts: o, log: log.New(o.Log, "mpsteer: ", log.LstdFlags|log.Lmicroseconds), cfg: cfg,
		engine: &policy.Engine{Policies: cfg.Policies}, intervalChanged: make(chan struct{}, 1), sampleNow: make(chan struct{}, 1),
		tracker: observe.NewTracker(), connActions: map[uint32][]api.ActionRecord{}, warned: map[string]bool{},
		pmMode: pathManager()}
	d.ops = newOps(d, o)
	if err := d.ops.start(); err != nil {
		return err
	}
	defer d.ops.close()
	if d.pmc, err = pm.Dial(pm.Options{}); err != nil {
		return err
	}
	d.life = newLifecycleActuator(d.pmc, d.pmMode)
	defer d.pmc.Close()
	if d.sampler, err = observe.NewSampler(0); err != nil {
		return err
	}
	defer d.sampler.Close()
	if err := d.openIterator(o.Sampler); err != nil {
		return err
	}
	if d.iter != nil {
		defer d.iter.Close()
	}
	events, err := pm.ListenEvents(pm.Options{})
	if err != nil {
		return err
	}
	defer events.Close()
	if d.cookie, err = bpfutil.NetNSCookie(); err != nil {
		return err
	}
	d.netns = netnsName()
	// Applications switched to MPTCP (mptcpize): before anything else
	// changes, so that a host that cannot do it is refused untouched.
	d.scope = newAppScope()
	prepared, err := d.scope.checkMptcpize(cfg, d.cookie)
	if err != nil {
		return err
	}
	d.scope.setMptcpize(cfg.Mptcpize, prepared)
	defer d.scope.close()
	statePath := filepath.Join(o.StateDir, fmt.Sprintf("daemon-netns-%d.json", d.cookie))
	if gone := pruneStateFiles(o.StateDir, statePath); len(gone) > 0 {
		d.log.Printf("removed %d state file(s) of namespaces that no longer exist: %s", len(gone), strings.Join(gone, ", "))
	}
	state := loadState(statePath)
	if leftovers := state.addrs(); len(leftovers) > 0 {
		// A previous daemon here was killed: undo what it left behind.
		d.log.Printf("restoring %d endpoint(s) left by a daemon that did not exit cleanly", len(leftovers))
		prev := &endpointActuator{c: d.pmc, state: state}
		d.record(prev.Restore()...)
	}
	d.act = d.chooseActuator(cfg.BackupVia, state)
	d.rates = newRateActuator(cfg.RateVia, d.cookie, d.manager)
	if _, err := d.reconcileChains(cfg); err != nil {
		d.record(d.act.Restore()...)
		return err
	}
	srv, err := d.serve(o.Socket)
	if err != nil {
		return err
	}
	defer func() {
		srv.Close()
		os.Remove(o.Socket)
	}()
	// The spread policy's rules and routes, once this is the namespace's
	// only daemon (the socket says so).
	d.mu.Lock()
	_, err = d.reconcileSpread(cfg)
	d.mu.Unlock()
	if err != nil {
		if d.dp != nil {
			d.dp.Close()
		}
		d.record(d.act.Restore()...)
		return err
	}
	d.log.Printf("running in netns %s: %d polic%s, %s path manager, backup via %s, every %v, socket %s", d.netns, len(cfg.Policies),
		plural(len(cfg.Policies), "y", "ies"), d.pmMode, d.act.Mode(), cfg.Interval, o.Socket)

	go d.eventLoop(events)
	d.ops.started(ctx) // config watch, systemd's READY=1
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	// Interfaces and addresses coming and going (a carrier lost, an
	// address removed or assigned): the policies decide again at once, not
	// at the next sample (a path that is back is probed right away).
	ifaceEvents := subscribeInterfaces(ctx, d.log)
	d.mu.Lock()
	d.syncRequirements() // before any subflow is decided on
	d.mu.Unlock()
	go d.healthLoop(ctx) // path-health reports (health.go)
	d.tick()
	var lastCost time.Duration // what the last sample took
	lastEnd := time.Now()      // when it ended
	// deferred: an extra sample asked for too soon is due (deferredDue).
	deferred, deferredDue := false, make(chan struct{}, 1)
	for {
		select {
		case <-ctx.Done():
			d.ops.stopping()
			d.shutdown()
			return nil
		case <-tick.C:
			lastCost, lastEnd = timed(d.tick)
		case <-ifaceEvents:
			// Every connection decided again, idle ones too: a path
			// that went or came changes what they should use.
			d.mu.Lock()
			d.quiet.forget()
			d.mu.Unlock()
			d.tick()
		case <-d.sampleNow:
			// An extra sample (a subflow joined as backup waits for it):
			// not within the last sample's own duration after it ended,
			// at least 20 ms, so a storm of joins on a large host costs
			// at most half the daemon's time in extra samples. One asked
			// for sooner is taken as soon as that allows (not dropped: a
			// joiner would wait for the next tick).
			if since, gap := time.Since(lastEnd), max(20*time.Millisecond, lastCost); since >= gap {
				lastCost, lastEnd = timed(d.tick)
			} else if !deferred {
				deferred = true
				time.AfterFunc(gap-since, func() { deferredDue <- struct{}{} })
			}
		case <-deferredDue:
			deferred = false
			if time.Since(lastEnd) >= 20*time.Millisecond {
				lastCost, lastEnd = timed(d.tick)
			}
		case <-d.intervalChanged:
			d.mu.Lock()
			iv := d.cfg.Interval
			d.mu.Unlock()
			tick.Reset(iv)
		case <-hup:
			// The file the daemon runs now: --config, or the last one
			// `policy apply` sent; a change of the file does the same
			// (ops.go, watch.go).
			d.reloadConfig("SIGHUP")
		}
	}
}

// checkSoon asks for a sample 20 ms after the actuator made an endpoint
// usable again, or while a subflow whose flag must change is still
// joining: the kernel sends MP_PRIO only to subflows whose join has
// completed (an RTT after the event), and the actuator sends it again once
// a sample shows the join complete and the flag still wrong. Waiting for
// the next tick would leave a just-joined subflow idle for up to an
// interval. It reports whether it asked.
func (d *Daemon) checkSoon() bool {
	if ea, ok := d.act.(*endpointActuator); !ok || !ea.recheck {
		return false
	}
	time.AfterFunc(20*time.Millisecond, func() {
		select {
		case d.sampleNow <- struct{}{}:
		default: // one is already due
		}
	})
	return true
}

// timed runs f and returns how long it took and when it ended.
func timed(f func()) (time.Duration, time.Time) {
	start := time.Now()
	f()
	end := time.Now()
	return end.Sub(start), end
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func netnsName() string {
	var st syscall.Stat_t
	if syscall.Stat("/proc/self/ns/net", &st) != nil {
		return "?"
	}
	if names, _ := netnsutil.List(""); names != nil {
		for _, n := range names {
			var s2 syscall.Stat_t
			if syscall.Stat(filepath.Join(netnsutil.Dir, n), &s2) == nil && s2.Ino == st.Ino && s2.Dev == st.Dev {
				return n
			}
		}
	}
	return fmt.Sprintf("net:[%d]", st.Ino)
}

func (d *Daemon) chooseActuator(via string, state *stateFile) backupActuator {
	if via == "auto" {
		via = "endpoint"
		if d.pmMode == policy.UserspacePM {
			via = "subflow"
		}
	}
	if via == "subflow" {
		return &subflowActuator{c: d.pmc, changed: map[policy.SubflowID]uint32{}}
	}
	return &endpointActuator{c: d.pmc, state: state}
}

func (d *Daemon) tick() {
	defer d.ops.roundDone(time.Now())
	ifaces.invalidate() // interfaces as they are now (snapshot.go)
	sampling := time.Now()
	sfs, err := d.sampleSubflows()
	if err != nil {
		d.log.Printf("sample: %v", err)
		d.ops.sampleError()
		return
	}
	conns := d.sampleConns(sfs)
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	d.checkWorld(now)
	if d.reactedAt.After(sampling) {
		// Events handled while the sample was read are newer than it.
		sfs = carryEvents(sfs, d.lastSubflows)
	}
	if d.iter != nil && cap(d.lastSubflows) > 0 {
		d.spareSubflows = d.lastSubflows[:0]
	}
	d.lastSubflows, d.lastConns, d.lastSampled = sfs, conns, now
	d.scope.sync() // a service's cgroup that came or went (appscope.go)
	snap := d.snapshot(now, sfs, conns, &d.snapBuf)
	snap.Sampled = now
	// The plan before last is filled again: its maps are no one's now.
	plan, apply := d.sparePlan, true
	if d.engine.QuietAware() {
		// Idle, unchanged connections keep their decisions, and while
		// no decision changes the actuators are not asked again (quiet.go).
		round := d.quiet.split(snap)
		d.engine.DecideInto(round, &d.freshPlan)
		plan.Lifecycle = d.freshPlan.Lifecycle
		if apply = d.quiet.keep(&d.freshPlan, round); apply {
			d.quiet.merge(&plan, &d.freshPlan, round)
			d.sparePlan, d.lastPlan = d.lastPlan, plan
		}
	} else {
		d.quiet.forget()
		d.engine.DecideInto(snap, &plan)
		d.sparePlan, d.lastPlan = d.lastPlan, plan
	}
	if apply {
		est := established(sfs)
		acts := d.act.Apply(d.lastPlan.Backup, est, true)
		again := d.checkSoon()
		acts = append(acts, d.rates.Apply(d.lastPlan.Limits, est, true)...)
		d.record(acts...)
		if len(acts) > 0 || again {
			// Acted, or an MP_PRIO still has to reach a joining
			// subflow: the next round looks again (quiet.go).
			d.quiet.dirty = true
		}
	}
	d.applyLifecycle(plan.Lifecycle, snap, now)
	d.syncRequirements()
	// Forget what belongs to connections that are gone.
	live := func(tok uint32) bool { _, ok := conns[tok]; return ok }
	d.tracker.Prune(live, now.Add(-10*time.Second))
	d.life.Forget(live)
	for tok := range d.connActions {
		if !live(tok) {
			delete(d.connActions, tok)
		}
	}
}

// establish marks a subflow established, as an event said, with the ids
// it gave. What a sample said of it while it was joining (a SYN
// outstanding, no ACK ever) says nothing of the established subflow: it
// would look stalled.
func establish(sf *observe.Subflow, localID, remoteID uint8) {
	if sf.State != tcpEstablished {
		sf.Unacked, sf.LastAckRecv, sf.Backoff, sf.CAState = 0, 0, 0, 0
	}
	sf.State, sf.LocalID, sf.RemoteID = tcpEstablished, localID, remoteID
}

// carryEvents adds to a sample what path-manager events told after it was
// read: a subflow that joined (events list it without a socket cookie)
// and one it shows still joining that an event said is established.
// Without them the round would undo what the events' decisions did, as
// if no one decided on those subflows any more.
func carryEvents(sfs, view []observe.Subflow) []observe.Subflow {
	est := map[policy.SubflowID]observe.Subflow{}
	for _, o := range view {
		if o.State == tcpEstablished {
			est[policy.ID(o)] = o
		}
	}
	inSample := map[policy.SubflowID]bool{}
	for i := range sfs {
		id := policy.ID(sfs[i])
		inSample[id] = true
		if o, ok := est[id]; ok && (sfs[i].State == tcpSynSent || sfs[i].State == tcpSynRecv) {
			establish(&sfs[i], o.LocalID, o.RemoteID)
		}
	}
	for _, o := range view {
		if o.Cookie == 0 && o.State == tcpEstablished && !inSample[policy.ID(o)] {
			sfs = append(sfs, o)
		}
	}
	return sfs
}

// applyLifecycle takes the actions other than backup flags and keeps
// their outcomes for the policies' next round and for status.
func (d *Daemon) applyLifecycle(acts []policy.Action, snap *policy.Snapshot, now time.Time) {
	if len(acts) == 0 {
		return
	}
	byTok := map[uint32]*policy.Conn{}
	for _, c := range snap.Conns {
		byTok[c.Token] = c
	}
	outs := d.life.Apply(acts, byTok, now)
	d.outcomes = append(d.outcomes, outs...)
	for _, o := range outs {
		r := outcomeRecord(o)
		if o.Result == policy.Unsupported {
			// Said once per policy and kind: the policy keeps asking.
			key := o.Action.Policy + "/" + string(o.Action.Kind)
			if d.warned[key] {
				continue
			}
			d.warned[key] = true
		}
		d.record(r)
		tok := o.Action.Token
		d.connActions[tok] = append(d.connActions[tok], r)
		if n := len(d.connActions[tok]); n > 32 {
			d.connActions[tok] = d.connActions[tok][n-32:]
		}
	}
}

// outcomeRecord turns a policy action's outcome into a status record.
func outcomeRecord(o policy.Outcome) api.ActionRecord {
	a := o.Action
	r := api.ActionRecord{At: o.At, Policy: a.Policy, Kind: string(a.Kind), Token: fmt.Sprintf("%08x", a.Token),
		Target: a.Target(), Result: string(o.Result), Error: o.Error, Reason: a.Reason}
	if a.Kind == policy.Backup {
		b := a.Backup
		r.Backup = &b
	}
	return r
}

// syncRequirements keeps the sockops programs in line with what the
// policies require.
func (d *Daemon) syncRequirements() {
	req := d.engine.Requirements()
	d.joinBackup = req.JoinBackup
	d.syncHealth(req) // health.go
	if ea, ok := d.act.(*endpointActuator); ok {
		ea.joinBackup = req.JoinBackup
	}
	if req.Limits && d.rates != nil {
		if err := d.rates.Ready(); err != nil {
			d.log.Printf("rate caps cannot be set (rate_via: %s): %v", d.cfg.RateVia, err)
		}
	}
	d.syncInitial(req) // initial.go
	want := req.RTOMax
	if len(want) == 0 && len(req.SynRTO) == 0 && d.rto == nil {
		return
	}
	if d.rto == nil {
		if d.rtoErr != "" {
			return // tried and failed; said so once
		}
		r, err := sockops.NewRTOCapper(d.cookie)
		if err != nil {
			d.rtoErr = err.Error()
			d.log.Printf("rto_max is not enforced: %v", err)
			return
		}
		d.rto = r
	}
	if err := d.rto.Set(want); err != nil {
		d.log.Printf("rto_max map: %v", err)
	}
	if err := d.rto.SetSynRTO(req.SynRTO); err != nil {
		d.log.Printf("SYN timeout map: %v", err)
	}
}

func (d *Daemon) record(acts ...api.ActionRecord) {
	for _, a := range acts {
		if d.logOnce(a) {
			d.log.Print(a.String())
		}
	}
	d.ops.recorded(acts) // metrics, monitor
	d.actions = append(d.actions, acts...)
	if n := len(d.actions); n > 100 {
		d.actions = d.actions[n-100:]
	}
}

// maxEventBatch bounds the events decided for at once (a flood of events
// still gets decisions along the way).
const maxEventBatch = 10000

func (d *Daemon) eventLoop(l *pm.EventListener) {
	// One goroutine reads (each read is one netlink message, mostly one
	// event), counts and tracks the events; this one decides. What arrived
	// while it decided is taken as one batch, decided for once: a ramp-up
	// of N joins does not cost N decisions over every connection.
	batches := make(chan []pm.Event, 4096)
	go func() {
		defer close(batches)
		for {
			evs, err := l.Receive()
			if err != nil {
				if errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "closed") {
					return
				}
				d.log.Printf("events: %v", err)
				continue
			}
			for _, ev := range evs {
				d.ops.event(ev) // metrics, monitor
				d.tracker.Handle(ev)
			}
			batches <- evs
		}
	}()
	for evs := range batches {
	drain:
		for len(evs) < maxEventBatch {
			select {
			case more, ok := <-batches:
				if !ok {
					break drain
				}
				evs = append(evs, more...)
			default:
				break drain
			}
		}
		d.react(evs)
	}
}

// track keeps the daemon's view of the subflows current between samples
// with what an event tells: a subflow established (it joins the view, or
// a joining one there becomes established), one closed (it leaves), a
// connection closed (its subflows leave). It reports whether the event
// concerns a subflow the policies should hear of now.
func (d *Daemon) track(ev pm.Event) bool {
	switch ev.Type {
	case pm.EventSubEstablished, pm.EventEstablished:
		if !ev.Local.IsValid() || !ev.Remote.IsValid() {
			return false
		}
		for i, o := range d.lastSubflows {
			if o.Token == ev.Token && o.Local == ev.Local && o.Remote == ev.Remote {
				establish(&d.lastSubflows[i], ev.LocalID, ev.RemoteID)
				return true
			}
		}
		d.lastSubflows = append(d.lastSubflows, observe.Subflow{Local: ev.Local, Remote: ev.Remote, Token: ev.Token,
			LocalID: ev.LocalID, RemoteID: ev.RemoteID, BackupRemote: ev.Backup, MPTCP: true, State: tcpEstablished})
		return true
	case pm.EventSubClosed, pm.EventClosed:
		keep := d.lastSubflows[:0]
		for _, o := range d.lastSubflows {
			gone := o.Token == ev.Token && (ev.Type == pm.EventClosed || o.Local == ev.Local && o.Remote == ev.Remote)
			if !gone {
				keep = append(keep, o)
			}
		}
		d.lastSubflows = keep
		return ev.Type == pm.EventSubClosed
	case pm.EventAnnounced, pm.EventRemoved:
		return true
	}
	return false
}

// react decides right away for the connections of a batch of events (a
// subflow that came up or went, a connection established, an address
// announced), without waiting for the next sample: the policies decide
// once over the whole snapshot, and what they want is applied for the
// events' connections.
func (d *Daemon) react(evs []pm.Event) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.reactedAt = time.Now()
	var toks []uint32
	received := map[uint32]time.Time{} // a connection's first event in the batch
	var now time.Time
	joined := false
	for _, ev := range evs {
		if !d.track(ev) {
			continue
		}
		joined = joined || ev.Type == pm.EventSubEstablished
		if _, ok := received[ev.Token]; !ok {
			received[ev.Token] = ev.Received
			toks = append(toks, ev.Token)
		}
		if ev.Received.After(now) {
			now = ev.Received
		}
	}
	if len(toks) == 0 {
		return
	}
	if joined && d.joinBackup {
		select {
		case d.sampleNow <- struct{}{}:
		default: // one is already due
		}
	}
	for _, tok := range toks {
		d.refreshConn(tok) // a new connection's cgroup (appscope.go)
	}
	snap := d.snapshot(now, d.lastSubflows, d.lastConns, nil)
	snap.Sampled = d.lastSampled // the figures are the last sample's
	full := d.engine.Decide(snap)
	// What the policies now want for these connections' subflows: a
	// subflow joining can change the others' fate (the preferred path just
	// arrived: the initial subflow becomes backup).
	plans := make(map[uint32]*policy.Plan, len(toks))
	for _, tok := range toks {
		p := policy.NewPlan()
		plans[tok] = &p
	}
	for sid, a := range full.Backup {
		if p := plans[a.Token]; p != nil {
			p.Backup[sid] = a
		}
	}
	for sid, a := range full.Limits {
		if p := plans[a.Token]; p != nil {
			p.Limits[sid] = a
		}
	}
	conns := map[uint32][]observe.Subflow{}
	for _, o := range d.lastSubflows {
		if o.State != tcpEstablished {
			continue
		}
		if p := plans[o.Token]; p != nil {
			if _, ok := p.Backup[policy.ID(o)]; ok {
				conns[o.Token] = append(conns[o.Token], o)
			}
		}
	}
	if d.lastPlan.Backup == nil {
		d.lastPlan.Backup = map[policy.SubflowID]policy.Action{}
	}
	if d.lastPlan.Limits == nil {
		d.lastPlan.Limits = map[policy.SubflowID]policy.Action{}
	}
	for _, tok := range toks {
		plan, conn := plans[tok], conns[tok]
		for sid, a := range plan.Backup {
			d.lastPlan.Backup[sid] = a
		}
		for sid, a := range plan.Limits {
			d.lastPlan.Limits[sid] = a
		}
		acts := d.act.Apply(plan.Backup, conn, false)
		d.checkSoon()
		acts = append(acts, d.rates.Apply(plan.Limits, conn, false)...)
		if len(acts) > 0 {
			d.reactions = append(d.reactions, time.Since(received[tok]))
			if n := len(d.reactions); n > 10000 {
				d.reactions = d.reactions[n-10000:]
			}
		}
		d.record(acts...)
	}
	// Lifecycle actions are wanted now, whichever connection they are for
	// (a policy that asked for them counts them as under way).
	d.applyLifecycle(full.Lifecycle, snap, now)
}

// reload applies a new config, all or nothing: on any error the running
// config stays untouched. What did not change is left alone: chains whose
// declaration is the same keep their counters and state, and policies
// whose entry is the same keep theirs.
func (d *Daemon) reload(file string, data []byte) (string, error) {
	var cfg *Config
	var err error
	if data == nil {
		cfg, err = LoadConfig(file)
	} else {
		cfg, err = ParseConfig(file, data, hostEnv())
	}
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg.Persist != d.cfg.Persist && d.dp != nil {
		return "", fmt.Errorf("%s: persist: %q cannot change while the daemon runs (it is %q; restart the daemon to change it)", file, cfg.Persist, d.cfg.Persist)
	}
	prepared, err := d.scope.checkMptcpize(cfg, d.cookie)
	if err != nil {
		return "", err
	}
	spreadRollback, err := d.reconcileSpread(cfg)
	if err != nil {
		if prepared != nil {
			prepared.Close()
		}
		return "", err
	}
	warnings, err := d.reconcileChains(cfg)
	if err != nil {
		spreadRollback()
		if prepared != nil {
			prepared.Close()
		}
		return "", err
	}
	// Nothing below can fail.
	if m := pathManager(); m != d.pmMode {
		d.log.Printf("the path manager is %s now (was %s)", m, d.pmMode)
		d.pmMode = m
		if d.life != nil {
			d.life.mode = m
		}
	}
	kept := 0
	for i, key := range cfg.policyKeys {
		for j, old := range d.cfg.policyKeys {
			if key == old && j < len(d.cfg.Policies) {
				cfg.Policies[i] = d.cfg.Policies[j]
				kept++
				break
			}
		}
	}
	engine := &policy.Engine{Policies: append([]policy.Policy(nil), cfg.Policies...)}
	d.hintOwned = false
	if d.hint != nil {
		d.applyHint(engine, d.hint)
	}
	if cfg.RateVia != d.cfg.RateVia {
		d.record(d.rates.Restore()...)
		d.rates = newRateActuator(cfg.RateVia, d.cookie, d.manager)
	}
	if cfg.BackupVia != d.cfg.BackupVia {
		d.record(d.act.Restore()...)
		state := loadState(filepath.Join(d.opts.StateDir, fmt.Sprintf("daemon-netns-%d.json", d.cookie)))
		d.act = d.chooseActuator(cfg.BackupVia, state)
	}
	ivChanged := cfg.Interval != d.cfg.Interval
	d.cfg, d.engine = cfg, engine
	d.quiet.forget() // the policies may have changed: decide everything
	d.scope.setMptcpize(cfg.Mptcpize, prepared)
	d.syncRequirements()
	if ivChanged {
		select {
		case d.intervalChanged <- struct{}{}:
		default: // a wake-up is pending already; it reads the new value
		}
	}
	var names []string
	for _, p := range engine.Policies {
		names = append(names, p.Name())
	}
	msg := fmt.Sprintf("applied %s: policies [%s] (%d kept with their state), %d chain(s)", file, strings.Join(names, ", "), kept, len(d.configChains))
	for _, w := range warnings {
		msg += "; warning: " + w
	}
	return msg, nil
}

// applyHint gives the user's hint to the prefer policy, adding one (first,
// so the user's word wins) when the config has none.
func (d *Daemon) applyHint(engine *policy.Engine, targets []string) error {
	d.quiet.forget()
	p, _ := engine.Get("prefer").(*policy.Prefer)
	if p == nil {
		p = policy.NewPrefer(hostEnv())
		engine.Policies = append([]policy.Policy{p}, engine.Policies...)
		d.hintOwned = true
	}
	return p.SetTargets(targets)
}

func (d *Daemon) setHint(targets []string, clear bool) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if clear {
		d.hint = nil
		msg := "preference cleared: the kernel's default behaviour applies"
		if p, _ := d.engine.Get("prefer").(*policy.Prefer); p != nil {
			if d.hintOwned {
				var keep []policy.Policy
				for _, q := range d.engine.Policies {
					if q != policy.Policy(p) {
						keep = append(keep, q)
					}
				}
				d.engine.Policies, d.hintOwned = keep, false
			} else {
				// The config's own prefer policy goes back to its paths.
				p.ResetTargets()
				if t := p.Targets(); len(t) > 0 {
					msg = "preference cleared: back to the config's paths " + strings.Join(t, ", then ")
				}
			}
		}
		return msg, nil
	}
	if len(targets) == 0 {
		return "", errors.New("name at least one interface or address to prefer")
	}
	for _, t := range targets {
		if _, err := netip.ParseAddr(t); err != nil {
			if _, ok := InterfaceAddrs(t); !ok {
				return "", fmt.Errorf("%q is neither an address nor an interface of namespace %s", t, d.netns)
			}
		}
	}
	if err := d.applyHint(d.engine, targets); err != nil {
		return "", err
	}
	d.hint = append([]string(nil), targets...)
	return "preferring " + strings.Join(targets, ", then "), nil
}

func (d *Daemon) shutdown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.record(d.act.Restore()...)
	d.record(d.rates.Restore()...)
	if d.rto != nil {
		d.rto.Close()
	}
	if d.initial != nil {
		d.initial.Close()
	}
	if d.dp != nil {
		d.dp.Close() // every chain detached: packets flow untouched
	}
	d.closeSpread()
	d.closeHealth()
	d.scope.close()
	d.log.Printf("stopped; changes undone")
}
