// Package daemon runs mpsteer in one network namespace as a reconciler:
// whatever happens (a sample of the kernel's subflows, a path-manager
// event, a path-health report, an interface going up or down, a reload, a
// user's hint) only marks what changed and wakes one loop; the loop builds
// the snapshot, asks the policies what they want (flags, caps, subflows,
// announcements, each with its reason), and one applier makes the kernel
// match, through one refusal gate, recording each outcome (loop.go). It
// fails open: a stopped loop applies nothing, a clean exit undoes what the
// daemon changed, and what it changes never stops MPTCP from working if
// it is killed.
package daemon

import (
	"context"
	"fmt"
	"io"
	"log"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"mpsteer/internal/actuator"
	"mpsteer/internal/api"
	"mpsteer/internal/apiserver"
	"mpsteer/internal/bpfutil"
	"mpsteer/internal/config"
	"mpsteer/internal/crashstate"
	"mpsteer/internal/datapath"
	"mpsteer/internal/lasthop"
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
	// MetricsAddr serves Prometheus metrics at /metrics.
	MetricsAddr string
	// MetricsSubflows: at most this many established subflows get
	// per-subflow series; negative: every one.
	MetricsSubflows int
	// NoWatch: do not reload the config when its file changes (watch.go).
	NoWatch bool
	// Sampler: how subflows are read (sampler.go): SamplerAuto (default),
	// SamplerIterator or SamplerDiag.
	Sampler string
	// Version is the build's version (metrics, status).
	Version string
	// LastHop are the last-hop sources report_health may name (nil:
	// lasthop.Builtin; the command adds the lab's).
	LastHop lasthop.Sources
}

// Daemon is one running instance (one per network namespace): what the
// reconcile loop needs. mu guards everything the loop reads and writes;
// the API, the metrics and the watchers take it briefly.
type Daemon struct {
	opts Options
	log  *log.Logger

	mu     sync.Mutex
	cfg    *config.Config
	engine *policy.Engine
	// lookPending: when a round without a sample is due (lookAt).
	lookPending time.Time
	hint        []string
	// hintOwned: the prefer policy exists only because of the hint.
	hintOwned bool
	pmMode    string
	// What the namespace's MPTCP sysctls said at the last look (world.go).
	mptcpEnabled string
	worldAt      time.Time

	// Observation: the path manager's netlink (its events feed the
	// tracker), the samplers, and the namespace's view as last seen.
	pmc     *pm.Client
	sampler *observe.Sampler
	iter    *subflowiter.Sampler
	pick    *samplerPick // under --sampler auto with the iterator loaded
	// bbrStateSaid: the log said a policy reads BBR's state without the
	// iterator (sampler.go).
	bbrStateSaid bool
	// sampleOnJoin: a policy acts on a join's SYN/ACK (Requirements); a
	// subflow's establishment event asks for a sample.
	sampleOnJoin bool
	tracker      *observe.Tracker
	view         view
	// connsReadAt: when the connections were last read (sampler.go).
	connsReadAt time.Time

	// Decision: the last plans and the quiet connections (quiet.go).
	lastPlan  policy.Plan
	sparePlan policy.Plan
	freshPlan policy.Plan
	quiet     quietConns
	snapBuf   []observe.Subflow
	// outcomes of lifecycle actions since the last snapshot: the next
	// one carries them to the policies.
	outcomes []policy.Outcome

	// Actuation: one applier (flags, rates, lifecycle, one gate), the
	// programs the policies' requirements load, and what the config
	// declares (chains, spread, mptcpize).
	apply  applier
	state  *crashstate.File
	progs  programs
	dp     *datapath.Manager
	chains []configChain
	spread *spreadState
	health *healthState
	// healthNow is health, for the poller (which never takes mu).
	healthNow atomic.Pointer[healthState]
	scope     *appScope
	cookie    uint64
	netns     string
	records   recordLog

	// in is where everything that happens is marked (loop.go).
	in   *inbox
	loop loopStats
	// joins: joining subflows an MP_PRIO waits for (joinwatch.go).
	joins *joinWatch
	ops   *ops
	// watched is the config file the watcher follows, once its directory
	// is watched and its content read (watch.go): a change from then on
	// is seen.
	watched atomic.Pointer[string]
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
	if o.LastHop == nil {
		o.LastHop = lasthop.Builtin()
	}
	cfg, err := config.Load(o.ConfigFile, hostEnv())
	if err != nil {
		return err
	}
	if err := checkKernel(cfg); err != nil {
		return err
	}
	d := &Daemon{opts: o, log: log.New(o.Log, "mpsteer: ", log.LstdFlags|log.Lmicroseconds), cfg: cfg,
		engine: &policy.Engine{Policies: cfg.Policies}, tracker: observe.NewTracker(), pmMode: observe.PathManager(),
		in: newInbox(), joins: newJoinWatch()}
	d.records.init()
	d.ops = newOps(d, o)
	if err := d.ops.start(); err != nil {
		return err
	}
	defer d.ops.close()
	if d.pmc, err = pm.Dial(pm.Options{}); err != nil {
		return err
	}
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
	if err := d.openState(); err != nil {
		return err
	}
	d.apply = newApplier(d.pmc, d.state, d.cookie, d.manager, cfg, d.pmMode, d.readSubflows)
	if _, err := d.reconcileChains(cfg); err != nil {
		d.records.add(d, d.apply.flags.Restore()...)
		return err
	}
	// What the policies require outside per-subflow decisions (the
	// sockops programs: rate caps, health reports, rto_max; the coupled
	// congestion controls) is in place before the API answers, and so
	// before any subflow is decided on: a sockops program sees only the
	// subflows established after it is attached, and whoever waits for
	// the daemon to answer may open connections at once.
	d.mu.Lock()
	d.syncRequirements()
	d.mu.Unlock()
	srv, err := apiserver.Serve(o.Socket, backend{d}, d.ops.hub)
	if err != nil {
		d.shutdown()
		return err
	}
	// The spread policy's rules and routes, once this is the namespace's
	// only daemon (the socket says so).
	d.mu.Lock()
	_, err = d.reconcileSpread(cfg)
	d.mu.Unlock()
	if err != nil {
		srv.Close()
		d.shutdown()
		return err
	}
	d.log.Printf("running in netns %s: %d polic%s, %s path manager, backup via %s, every %v, socket %s", d.netns, len(cfg.Policies),
		plural(len(cfg.Policies), "y", "ies"), d.pmMode, d.apply.flags.Mode(), cfg.Interval, o.Socket)

	// Everything that happens marks the inbox and wakes the loop.
	var producers sync.WaitGroup
	pctx, stopProducers := context.WithCancel(ctx)
	start := func(f func(context.Context)) {
		producers.Add(1)
		go func() { defer producers.Done(); f(pctx) }()
	}
	start(func(ctx context.Context) { d.readEvents(ctx, events) })
	start(d.sampleLoop)
	start(d.watchJoins)
	start(d.healthLoop)
	start(func(ctx context.Context) { watchInterfaces(ctx, d.log, d.in) })
	d.ops.started(ctx) // config watch, systemd's READY=1
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-pctx.Done():
				return
			case <-hup:
				// The file the daemon runs now: --config, or the last one
				// `policy apply` sent; a change of the file does the same.
				d.reloadConfig("SIGHUP")
			}
		}
	}()
	d.runLoop(ctx) // until ctx ends: nothing is applied after it returns

	d.ops.stopping()
	srv.Close() // no more hints or reloads
	stopProducers()
	events.Close() // the event reader's Receive returns
	producers.Wait()
	d.shutdown()
	return nil
}

// openState reads what a previous daemon here left to undo, undoes it, and
// keeps this daemon's state in the same file. A state that cannot be read
// is said (and kept in status), never taken for empty silently.
func (d *Daemon) openState() error {
	path := crashstate.Path(d.opts.StateDir, d.cookie)
	if gone := crashstate.Prune(d.opts.StateDir, path); len(gone) > 0 {
		d.log.Printf("removed %d state file(s) of namespaces that no longer exist: %s", len(gone), strings.Join(gone, ", "))
	}
	state, err := crashstate.Load(path)
	if err != nil {
		d.log.Printf("%v", err)
		d.records.stateErr = err.Error()
	}
	d.state = state
	if !state.Empty() {
		// A previous daemon here was killed: undo what it left behind,
		// where no one has changed it since.
		d.log.Printf("restoring %d endpoint(s) left by a daemon that did not exit cleanly", len(state.Addrs()))
		d.records.add(d, actuator.RestoreLeftovers(d.pmc, state, d.readSubflows)...)
	}
	return nil
}

// readSubflows reads the namespace's subflows now (inet_diag), for the
// flag actuator's removals and re-adds of endpoints.
func (d *Daemon) readSubflows() ([]observe.Subflow, error) { return d.sampler.Subflows() }

// shutdown undoes what the daemon changed; the loop has stopped.
func (d *Daemon) shutdown() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.records.add(d, d.apply.restore()...)
	d.progs.close()
	if d.dp != nil {
		d.dp.Close() // every chain detached: packets flow untouched
	}
	d.closeSpread()
	d.closeHealth()
	d.scope.close()
	d.log.Printf("stopped; changes undone")
}

// manager returns the datapath manager, loading it on first use (called
// with mu held, or before the loop runs).
func (d *Daemon) manager() (*datapath.Manager, error) {
	if d.dp != nil {
		return d.dp, nil
	}
	// Persist is read once: the maps are chosen when they are loaded.
	m, err := datapath.NewManagerWith(datapath.Options{PinDir: d.cfg.Persist})
	if err != nil {
		return nil, err
	}
	d.dp = m
	return m, nil
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

// programs are the BPF programs the policies' requirements load
// (requirements.go): rto_max and the SYN timeout, avoid_initial, the
// coupled congestion controls (coupled.go).
type programs struct {
	rto    *sockops.RTOCapper
	rtoErr string
	// rtoApplied, notsentApplied and exceptApplied: what the subflows established
	// before were last given (RTOCapper.ApplyToExisting); existingErr
	// its last failure, said once.
	rtoApplied     map[netip.Addr]time.Duration
	notsentApplied int
	exceptApplied  []string
	existingErr    string
	initial        *sockops.InitialBinder
	initialErr     string
	coupled        couplers
}

func (p *programs) close() {
	p.coupled.close()
	if p.rto != nil {
		p.rto.Close()
		p.rto = nil
	}
	if p.initial != nil {
		p.initial.Close()
		p.initial = nil
	}
}
