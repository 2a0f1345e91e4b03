package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"

	"mpsteer/internal/api"
	"mpsteer/internal/datapath"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/pm"
	"mpsteer/internal/policy"
)

// Options tune Run.
type Options struct {
	ConfigFile string
	Socket     string
	StateDir   string // default /run/mpsteer
	Log        io.Writer
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

	pmc     *pm.Client
	sampler *observe.Sampler
	act     backupActuator
	rto     *datapath.RTOCapper
	rtoErr  string
	dp      *datapath.Manager
	// configChains are the chains the config declared, as attached.
	configChains []configChain
	cookie       uint64
	netns        string

	lastSubflows  []observe.Subflow
	lastConns     map[uint32]observe.Conn
	lastDecisions map[policy.SubflowID]policy.Decision
	actions       []Action
	reactions     []time.Duration
}

// InterfaceAddrs resolves an interface of the daemon's namespace.
func InterfaceAddrs(name string) ([]netip.Addr, bool) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, false
	}
	addrs, err := ifi.Addrs()
	if err != nil {
		return nil, true
	}
	var out []netip.Addr
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			if ad, ok := netip.AddrFromSlice(ipn.IP); ok && !ad.Unmap().IsLinkLocalUnicast() {
				out = append(out, ad.Unmap())
			}
		}
	}
	return out, true
}

var env = policy.Env{Addrs: InterfaceAddrs}

// LoadConfig reads and validates a config file.
func LoadConfig(file string) (*Config, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return ParseConfig(file, data, env)
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
		engine: &policy.Engine{Policies: cfg.Policies}, intervalChanged: make(chan struct{}, 1)}
	if d.pmc, err = pm.Dial(pm.Options{}); err != nil {
		return err
	}
	defer d.pmc.Close()
	if d.sampler, err = observe.NewSampler(0); err != nil {
		return err
	}
	defer d.sampler.Close()
	events, err := pm.ListenEvents(pm.Options{})
	if err != nil {
		return err
	}
	defer events.Close()
	if d.cookie, err = datapath.NetNSCookie(); err != nil {
		return err
	}
	d.netns = netnsName()
	state := loadState(filepath.Join(o.StateDir, fmt.Sprintf("daemon-netns-%d.json", d.cookie)))
	if leftovers := state.addrs(); len(leftovers) > 0 {
		// A previous daemon here was killed: undo what it left behind.
		d.log.Printf("restoring %d endpoint(s) left by a daemon that did not exit cleanly", len(leftovers))
		prev := &endpointActuator{c: d.pmc, state: state}
		d.record(prev.Restore())
	}
	d.act = d.chooseActuator(cfg.BackupVia, state)
	if _, err := d.reconcileChains(cfg); err != nil {
		d.record(d.act.Restore())
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
	d.log.Printf("running in netns %s: %d polic%s, backup via %s, every %v, socket %s", d.netns, len(cfg.Policies),
		plural(len(cfg.Policies), "y", "ies"), d.act.Mode(), cfg.Interval, o.Socket)

	go d.eventLoop(events)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	tick := time.NewTicker(cfg.Interval)
	defer tick.Stop()
	d.tick()
	for {
		select {
		case <-ctx.Done():
			d.shutdown()
			return nil
		case <-tick.C:
			d.tick()
		case <-d.intervalChanged:
			d.mu.Lock()
			iv := d.cfg.Interval
			d.mu.Unlock()
			tick.Reset(iv)
		case <-hup:
			// The file the daemon runs now: --config, or the last one
			// `policy apply` sent.
			d.mu.Lock()
			file := d.cfg.File
			d.mu.Unlock()
			if msg, err := d.reload(file, nil); err != nil {
				d.log.Printf("SIGHUP: config not applied, the old one stays: %v", err)
			} else {
				d.log.Printf("SIGHUP: %s", msg)
			}
		}
	}
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
		if v, err := netnsutil.ReadSysctl("net.mptcp.path_manager"); err == nil && v == "userspace" {
			via = "subflow"
		} else if v, err := netnsutil.ReadSysctl("net.mptcp.pm_type"); err == nil && v == "1" {
			via = "subflow"
		}
	}
	if via == "subflow" {
		return &subflowActuator{c: d.pmc, changed: map[policy.SubflowID]uint32{}}
	}
	return &endpointActuator{c: d.pmc, state: state}
}

// snapshot groups subflows by connection, with the connections' own
// counters when known.
func snapshot(now time.Time, sfs []observe.Subflow, conns map[uint32]observe.Conn) *policy.Snapshot {
	by := map[uint32]*policy.Conn{}
	var order []uint32
	for _, sf := range sfs {
		c := by[sf.Token]
		if c == nil {
			c = &policy.Conn{Token: sf.Token, BytesAcked: conns[sf.Token].BytesAcked}
			by[sf.Token] = c
			order = append(order, sf.Token)
		}
		c.Subflows = append(c.Subflows, sf)
	}
	s := &policy.Snapshot{Now: now}
	for _, t := range order {
		s.Conns = append(s.Conns, by[t])
	}
	return s
}

// usable drops sockets that are not carrying a connection (closing ones).
func usable(sfs []observe.Subflow) []observe.Subflow {
	out := sfs[:0]
	for _, sf := range sfs {
		if sf.State == 1 { // TCP_ESTABLISHED
			out = append(out, sf)
		}
	}
	return out
}

func (d *Daemon) tick() {
	sfs, err := d.sampler.Subflows()
	if err != nil {
		d.log.Printf("sample: %v", err)
		return
	}
	sfs = usable(sfs)
	conns := map[uint32]observe.Conn{}
	if cs, err := d.sampler.Conns(); err == nil {
		for _, c := range cs {
			conns[c.Token] = c
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	d.lastConns = conns
	dec := d.engine.Decide(snapshot(time.Now(), sfs, conns))
	d.lastSubflows, d.lastDecisions = sfs, dec
	d.record(d.act.Apply(dec, sfs, true))
	d.syncRTO()
}

// syncRTO keeps the sockops program in line with what policies require.
func (d *Daemon) syncRTO() {
	want := d.engine.Requirements().RTOMax
	if len(want) == 0 && d.rto == nil {
		return
	}
	if d.rto == nil {
		if d.rtoErr != "" {
			return // tried and failed; said so once
		}
		r, err := datapath.NewRTOCapper(d.cookie)
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
}

func (d *Daemon) record(acts []Action) {
	for _, a := range acts {
		if a.Error != "" {
			d.log.Printf("%s: FAILED: %s", a.What, a.Error)
		} else {
			d.log.Printf("%s (%s)", a.What, a.Reason)
		}
	}
	d.actions = append(d.actions, acts...)
	if n := len(d.actions); n > 100 {
		d.actions = d.actions[n-100:]
	}
}

func (d *Daemon) eventLoop(l *pm.EventListener) {
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
			if ev.Type == pm.EventSubEstablished || ev.Type == pm.EventEstablished {
				d.react(ev)
			}
		}
	}
}

// react decides right away for a subflow that just came up, without
// waiting for the next sample.
func (d *Daemon) react(ev pm.Event) {
	if !ev.Local.IsValid() || !ev.Remote.IsValid() {
		return
	}
	sf := observe.Subflow{Local: ev.Local, Remote: ev.Remote, Token: ev.Token, LocalID: ev.LocalID,
		RemoteID: ev.RemoteID, BackupRemote: ev.Backup, MPTCP: true, State: 1}
	id := policy.ID(sf)
	d.mu.Lock()
	defer d.mu.Unlock()
	sfs := make([]observe.Subflow, 0, len(d.lastSubflows)+1)
	for _, o := range d.lastSubflows {
		if policy.ID(o) != id {
			sfs = append(sfs, o)
		}
	}
	sfs = append(sfs, sf)
	dec := d.engine.Decide(snapshot(ev.Received, sfs, d.lastConns))
	// Apply what the policies now want for this connection's subflows: a
	// subflow joining can change the others' fate (the preferred path just
	// arrived: the initial subflow becomes backup).
	mine := map[policy.SubflowID]policy.Decision{}
	var conn []observe.Subflow
	for _, o := range sfs {
		if o.Token != ev.Token {
			continue
		}
		if dd, ok := dec[policy.ID(o)]; ok {
			mine[policy.ID(o)] = dd
			conn = append(conn, o)
		}
	}
	if len(mine) == 0 {
		return
	}
	acts := d.act.Apply(mine, conn, false)
	if len(acts) > 0 {
		d.reactions = append(d.reactions, time.Since(ev.Received))
		if n := len(d.reactions); n > 10000 {
			d.reactions = d.reactions[n-10000:]
		}
	}
	d.record(acts)
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
		cfg, err = ParseConfig(file, data, env)
	}
	if err != nil {
		return "", err
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if cfg.Persist != d.cfg.Persist && d.dp != nil {
		return "", fmt.Errorf("%s: persist: %q cannot change while the daemon runs (it is %q; restart the daemon to change it)", file, cfg.Persist, d.cfg.Persist)
	}
	warnings, err := d.reconcileChains(cfg)
	if err != nil {
		return "", err
	}
	// Nothing below can fail.
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
	if cfg.BackupVia != d.cfg.BackupVia {
		d.record(d.act.Restore())
		state := loadState(filepath.Join(d.opts.StateDir, fmt.Sprintf("daemon-netns-%d.json", d.cookie)))
		d.act = d.chooseActuator(cfg.BackupVia, state)
	}
	ivChanged := cfg.Interval != d.cfg.Interval
	d.cfg, d.engine = cfg, engine
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
	p, _ := engine.Get("prefer").(*policy.Prefer)
	if p == nil {
		p = policy.NewPrefer(env)
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
	d.record(d.act.Restore())
	if d.rto != nil {
		d.rto.Close()
	}
	if d.dp != nil {
		d.dp.Close() // every chain detached: packets flow untouched
	}
	d.log.Printf("stopped; changes undone")
}

// Status builds the API's status.
func (d *Daemon) Status() api.Status {
	d.mu.Lock()
	defer d.mu.Unlock()
	st := api.Status{PID: os.Getpid(), NetNS: d.netns, Config: d.cfg.File, BackupVia: d.act.Mode(),
		IntervalMs: float64(d.cfg.Interval) / 1e6, Hint: d.hint}
	for _, p := range d.engine.Policies {
		st.Policies = append(st.Policies, api.PolicyStatus{Name: p.Name(), Status: p.Status()})
	}
	byTok := map[uint32]*api.ConnStatus{}
	var toks []uint32
	for _, sf := range d.lastSubflows {
		c := byTok[sf.Token]
		if c == nil {
			c = &api.ConnStatus{Token: fmt.Sprintf("%08x", sf.Token)}
			byTok[sf.Token] = c
			toks = append(toks, sf.Token)
		}
		ss := api.SubflowStatus{Local: sf.Local.String(), Remote: sf.Remote.String(), LocalID: sf.LocalID, RemoteID: sf.RemoteID,
			BackupLocal: sf.BackupLocal, BackupRemote: sf.BackupRemote, SRTTMs: float64(sf.SRTT) / 1e6, Cwnd: sf.Cwnd,
			DeliveryMbit: float64(sf.DeliveryRate) * 8 / 1e6, BytesAcked: sf.BytesAcked, Retransmits: sf.TotalRetrans}
		if dec, ok := d.lastDecisions[policy.ID(sf)]; ok {
			ss.Decision = &api.Decision{Policy: dec.Policy, Backup: dec.Backup, Reason: dec.Reason}
		}
		c.Subflows = append(c.Subflows, ss)
	}
	for _, t := range toks {
		st.Connections = append(st.Connections, *byTok[t])
	}
	for _, a := range d.actions {
		b, _ := json.Marshal(a)
		st.Actions = append(st.Actions, b)
	}
	st.Reaction = latencyStats(d.reactions)
	if d.rto != nil {
		st.RTO = d.rto.Stats()
	}
	st.Chains = d.chainStatus()
	return st
}

func latencyStats(ds []time.Duration) api.Latency {
	if len(ds) == 0 {
		return api.Latency{}
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	at := func(q float64) float64 { return float64(s[int(q*float64(len(s)-1))]) / 1e3 }
	return api.Latency{Count: len(s), MedianUs: at(0.5), P99Us: at(0.99)}
}

// Env is the policy environment of this host (interface resolution).
func Env() policy.Env { return env }
