package policy

import (
	"fmt"
	"net/netip"
	"regexp"
	"sort"
	"sync"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// Prefer is the user's path preference (paper: user-controlled subflow
// selection). The user names preferred paths, by interface or address, in
// order. While a preferred subflow is viable, data goes only there and
// every other subflow is backup. A preferred subflow is deactivated when
// its RTT exceeds δ = k·min SRTT over the connection's subflows, or when it
// stalls (data outstanding and no ACK for longer than δ, or a
// retransmission timeout pending). While deactivated it is probed, so that
// it comes back as soon as it is viable again: a slow subflow falls back
// to the kernel's default behaviour (all subflows usable, as in the paper),
// which keeps its RTT measured; a stalled one is made backup (new data
// would only be lost) and TCP's own retransmissions probe it, with the
// timeout capped at RTOMax.
type Prefer struct {
	mu      sync.Mutex
	targets []string
	PreferConfig
	PreferProbeConfig
	// mesh opens the connection's other subflows when the userspace path
	// manager runs the namespace (there, no subflow is opened unless a
	// policy asks): one per pair of a local and a remote address, as
	// fullmesh does.
	mesh *Fullmesh
	// rtoMaxGiven: the entry sets rto_max (the default is 1s).
	rtoMaxGiven bool
	env         Env
	conns       map[uint32]*preferConn
	rtts        map[SubflowID]*rttWindow
	round       uint64 // Decide's calls, to stamp the RTT windows in use
	status      PreferStatus
	// connStatus: each connection's part of the status, as last decided.
	connStatus map[uint32]PreferConnStatus
	// availabilityOnly: a preferred subflow is given up only when it is
	// unavailable (stalled), never for its RTT (ATSSS's active-standby:
	// the active access carries the traffic while it works).
	availabilityOnly bool
}

// rttWindow keeps the smallest of a subflow's SRTT samples over a sliding
// window. It holds only the samples that can still be the smallest (each
// smaller than every later one), oldest first: the first is the minimum.
// It takes one sample per sample of the kernel's figures: deciding again
// between samples (an event) sees the same figures and adds nothing.
type rttWindow struct {
	e    extreme[time.Duration]
	last time.Time // when the figures of the last sample added were sampled
	// round: the last Decide that saw the subflow; token: its connection.
	round uint64
	token uint32
}

func shorter(a, b time.Duration) bool { return a < b }

// maxRTTSamples bounds a window. More samples are kept only while the SRTT
// rises sample after sample; beyond this many the oldest go, and the
// window is that much shorter.
const maxRTTSamples = 64

// add takes the SRTT sampled at sampled (zero: a new sample at now) and
// returns the smallest over the window (the latest sample is kept even
// when older than the window).
func (w *rttWindow) add(now, sampled time.Time, srtt, window time.Duration) time.Duration {
	if srtt > 0 && (sampled.IsZero() || sampled.After(w.last)) {
		at := now
		if !sampled.IsZero() {
			at, w.last = sampled, sampled
		}
		w.e.push(at, srtt, shorter, maxRTTSamples)
	}
	w.e.expire(now, window)
	v, _ := w.e.first()
	return v
}

type preferConn struct {
	active   bool
	chosen   SubflowID
	since    time.Time
	born     time.Time // the round that first saw the connection
	switches int
	// everActive: a preferred subflow carried at some point; outage: since
	// when none is viable after that (zero: not in an outage); hold: the
	// other subflows held meanwhile (prefer_hold.go).
	everActive bool
	outage     time.Time
	hold       map[SubflowID]*holdState
	// joinSeen: when a preferred subflow whose join has not completed was
	// first chosen in the outage (zero: none).
	joinSeen time.Time
	// stalled are the preferred subflows judged stalled in the last round.
	stalled map[SubflowID]bool
	// probing: per preferred local address with no viable subflow, the
	// probes under way (prefer_probe.go); seenOn: preferred addresses the
	// connection had a subflow on.
	probing map[netip.Addr]*probeState
	seenOn  map[netip.Addr]bool
	closing map[SubflowID]time.Time // subflows asked to close, and when
}

// PreferStatus explains the policy's state.
type PreferStatus struct {
	Targets  []string            `json:"targets"`
	Resolved map[string][]string `json:"resolved"`
	K        float64             `json:"k"`
	Conns    []PreferConnStatus  `json:"connections"`
}

// PreferConnStatus is one connection's state.
type PreferConnStatus struct {
	Token    string   `json:"token"`
	State    string   `json:"state"` // preferred, deactivated, no-preferred-subflow
	Chosen   string   `json:"chosen,omitempty"`
	DeltaMs  float64  `json:"delta_ms"`
	Switches int      `json:"switches"`
	Subflows []string `json:"subflows"`
	// Probing: per preferred address with no viable subflow, the probes
	// opened so far and since when.
	Probing []string `json:"probing,omitempty"`
}

// PreferConfig is what prefer reads of its config entry under either
// path manager.
type PreferConfig struct {
	// Paths are the preferred paths, in order, as configured; the user's
	// hint (SetTargets) replaces them until it is cleared.
	Paths targets `yaml:"paths"`
	// K: δ = K·min SRTT over the connection's subflows.
	K float64 `yaml:"k" min:"1" max:"100"`
	// RTOMax caps the preferred subflows' retransmission timeout (0: the
	// kernel's).
	RTOMax time.Duration `yaml:"rto_max"`
	// RTTWindow: a subflow's RTT is the smallest SRTT it reported over this
	// window (0 = its current SRTT, literally the paper's). A path that
	// carries all the data queues up to a BDP of its own traffic, which
	// inflates its SRTT against idle paths; a few seconds' minimum keeps
	// that out of δ while a real change of latency still shows.
	RTTWindow time.Duration `yaml:"rtt_window"`
	// MinDelta is a floor under δ: on sub-millisecond paths (a LAN, veth)
	// RTTs jitter by multiples of themselves, and a few milliseconds more
	// are no reason to drop the user's choice.
	MinDelta time.Duration `yaml:"min_delta"`
	// NotSentLowat bounds the unsent data MPTCP queues on each subflow
	// (TCP_NOTSENT_LOWAT): when the preferred path is back, the other
	// subflows are set backup but still send what they hold, which with
	// the kernel's send buffers took seconds. Default 16KiB; 0 leaves the
	// kernel's.
	NotSentLowat units.Size `yaml:"notsent_lowat" min:"0B" max:"1GiB"`
	// AvoidInitial are paths (interfaces or addresses) the user marked
	// volatile: no connection opens its initial subflow there.
	AvoidInitial targets `yaml:"avoid_initial"`
	// HoldOthers: while a connection's preferred path is out, its other
	// subflows are held to the rate their path delivers once it shows a
	// queue, so that little of theirs is left in flight when the
	// preferred path is back (prefer_hold.go). Default on.
	HoldOthers bool `yaml:"hold_others"`
}

// PreferOpenConfig says whether prefer opens the connections' subflows
// (the userspace path manager only; default yes).
type PreferOpenConfig struct {
	OpenSubflows bool `yaml:"open_subflows"`
}

// PreferProbeConfig is the fast return's keys (prefer_probe.go), read
// where prefer opens the subflows.
type PreferProbeConfig struct {
	// ProbeInterval: while no subflow on a preferred address is viable
	// because the ones there stalled (or are gone), a fresh subflow (an
	// MP_JOIN SYN: the cheapest liveness probe there is) is opened from it
	// this often; the first that the path answers takes over and the
	// stalled ones are closed, so data is back on the preferred path one
	// handshake after the path returns instead of at the stalled subflow's
	// next backed-off retransmission. 0 = off.
	ProbeInterval time.Duration `yaml:"probe_interval"`
	// MaxProbes: probes of one address under way at once (0: the
	// default, defaultMaxProbes).
	MaxProbes int `yaml:"max_probes" min:"1" max:"32"`
}

var ifaceRE = regexp.MustCompile(`^[A-Za-z0-9_.:-]{1,15}$`)

func buildPrefer(m *yamlcfg.Map, env Env) Policy {
	p := NewPrefer(env)
	yamlcfg.Decode(m, &p.PreferConfig)
	p.rtoMaxGiven = m.Has("rto_max")
	p.targets = append([]string(nil), p.Paths...)
	if p.RTOMax != 0 && (p.RTOMax < time.Second || p.RTOMax > 120*time.Second) && !m.Failed("rto_max") {
		m.Errorf("rto_max", "%v is outside what the kernel accepts for TCP_RTO_MAX_MS (1s to 120s; 0s keeps the default)", p.RTOMax)
	}
	decodePreferOpening(p, m, env) // prefer_probe.go
	return p
}

func checkTarget(t string) error {
	if _, err := netip.ParseAddr(t); err == nil {
		return nil
	}
	if !ifaceRE.MatchString(t) {
		return fmt.Errorf("%q is neither an IP address nor an interface name", t)
	}
	return nil
}

// defaultNotSentLowat bounds the unsent data queued on each subflow
// (PreferConfig.NotSentLowat).
const defaultNotSentLowat = 16 << 10

// NewPrefer makes the policy with the paper's defaults (k = 2) and the
// fast return: under the userspace path manager it opens the connection's
// subflows and probes a stalled preferred path with fresh joins
// (prefer_probe.go); under the kernel path manager it has the endpoint of
// a stalled preferred address re-added, which makes the kernel open fresh
// subflows from it (prefer_reopen.go).
func NewPrefer(env Env) *Prefer {
	p := &Prefer{PreferConfig: PreferConfig{K: 2, RTOMax: time.Second, RTTWindow: 5 * time.Second, MinDelta: 5 * time.Millisecond}, env: env, conns: map[uint32]*preferConn{}, rtts: map[SubflowID]*rttWindow{}, connStatus: map[uint32]PreferConnStatus{}}
	// Under either path manager a subflow set backup still sends what it
	// holds; 16 KiB queued instead of the kernel's send buffer.
	p.NotSentLowat = defaultNotSentLowat
	p.HoldOthers = true
	switch env.PathManager {
	case UserspacePM:
		// The daemon is the path manager: prefer opens the connection's
		// subflows, and probes a stalled preferred path (prefer_probe.go).
		p.mesh = NewFullmesh(env)
		p.mesh.ConnStallTimeout = 0
		p.ProbeInterval = defaultProbeInterval
	case KernelPM:
		p.ProbeInterval = defaultReopenInterval
	}
	return p
}

// Name is "prefer".
func (p *Prefer) Name() string { return "prefer" }

// SetTargets replaces the user's hint (nil = no preference).
func (p *Prefer) SetTargets(targets []string) error {
	for _, t := range targets {
		if err := checkTarget(t); err != nil {
			return err
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets = append([]string(nil), targets...)
	return nil
}

// ResetTargets goes back to the paths of the policy's config entry.
func (p *Prefer) ResetTargets() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.targets = append([]string(nil), p.Paths...)
}

// Targets returns the current hint.
func (p *Prefer) Targets() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.targets...)
}

// ranks resolves the targets to local addresses and their rank (0 = most
// preferred). Interfaces are resolved on every call: addresses come and go.
func (p *Prefer) ranks() (map[netip.Addr]int, map[string][]string) {
	rank := map[netip.Addr]int{}
	resolved := map[string][]string{}
	for i, t := range p.targets {
		var addrs []netip.Addr
		if a, err := netip.ParseAddr(t); err == nil {
			addrs = []netip.Addr{a.Unmap()}
		} else if p.env.Addrs != nil {
			addrs, _ = p.env.Addrs(t)
		}
		for _, a := range addrs {
			if _, seen := rank[a]; !seen {
				rank[a] = i
			}
			resolved[t] = append(resolved[t], a.String())
		}
	}
	return rank, resolved
}

// Requirements caps the RTO of subflows on preferred addresses, sets the
// SYN timeout of probes, and keeps initial subflows off volatile paths.
func (p *Prefer) Requirements() Requirements {
	p.mu.Lock()
	defer p.mu.Unlock()
	r := Requirements{RTOMax: map[netip.Addr]time.Duration{}, SynRTO: map[netip.Addr]time.Duration{}}
	rank, _ := p.ranks()
	if p.RTOMax > 0 {
		for a := range rank {
			r.RTOMax[a] = p.RTOMax
		}
	}
	// Probes under way: each retransmits its SYN five times per interval.
	for _, st := range p.conns {
		for a := range st.probing {
			r.SynRTO[a] = p.synRTO()
		}
	}
	r.InitialAvoid, r.InitialAddr = p.initial(rank)
	r.NotSentLowat = int(p.NotSentLowat)
	r.Limits = p.HoldOthers && len(rank) > 0
	r.SampleOnJoin = r.Limits // the others hold back while a preferred join completes
	return r
}

// stallFloor: a path is called stalled (silent), or slower than its RTT,
// only after at least this long without an ACK while it has data
// outstanding, whatever δ. On a sub-millisecond path δ is its 5 ms floor,
// and a busy host leaves ACKs that long unprocessed by scheduling alone:
// the daemon's test over unshaped veths (both CPUs busy) saw its
// preferred path called stalled for one round, and MPTCP sent the tens of
// MB in flight there again over the path the user did not want. Paths of
// 12.5 ms RTT or more (δ ≥ 25 ms: every lab prefer scenario) are not
// affected, and the daemon samples every 100 ms, so detection is not
// slowed where it matters.
const stallFloor = 25 * time.Millisecond

// viability of one subflow, whose RTT (windowed) is rtt, against δ.
func (p *Prefer) viable(sf observe.Subflow, rtt, delta time.Duration) (ok, stalled bool, why string) {
	if sf.Unacked > 0 && sf.LastAckRecv > max(rtt, stallFloor) {
		rtt = sf.LastAckRecv // waiting this long for an ACK: the RTT is at least this
	}
	switch {
	case sf.Backoff > 0 || sf.CAState == 4:
		return false, true, fmt.Sprintf("retransmission timeout pending (backoff %d)", sf.Backoff)
	case sf.Unacked > 0 && sf.LastAckRecv > max(delta, stallFloor):
		return false, true, fmt.Sprintf("no ACK for %s with data outstanding > %s", fmtMs(sf.LastAckRecv), fmtMs(max(delta, stallFloor)))
	case rtt > delta && !p.availabilityOnly:
		return false, false, fmt.Sprintf("srtt %s > δ %s", fmtMs(rtt), fmtMs(delta))
	case p.availabilityOnly:
		return true, false, "available: ACKs arrive, no retransmission timeout pending"
	}
	return true, false, fmt.Sprintf("srtt %s ≤ δ %s", fmtMs(rtt), fmtMs(delta))
}

// Decide implements the preference for every connection.
func (p *Prefer) Decide(s *Snapshot) []Action {
	p.mu.Lock()
	defer p.mu.Unlock()
	rank, resolved := p.ranks()
	st := PreferStatus{Targets: append([]string(nil), p.targets...), Resolved: resolved, K: p.K}
	defer func() { p.status = st }()
	seen := make(map[uint32]bool, len(s.Conns))
	p.round++ // the RTT windows of the subflows seen in it are stamped (rtt)
	n := 0
	for _, c := range s.Conns {
		n += len(c.Subflows)
	}
	out := make([]Action, 0, n) // a decision per subflow
	for _, c := range s.Conns {
		seen[c.Token] = true
		cs := PreferConnStatus{Token: fmt.Sprintf("%08x", c.Token)}
		out = append(out, p.decideConn(s.Now, s.Sampled, c, rank, &cs)...)
		out = append(out, p.lifecycle(s.Now, c, rank, &cs)...)
		p.connStatus[c.Token] = cs
	}
	out = p.withMesh(s, out)
	// What belongs to connections and subflows that are gone goes; with
	// quiet connections in the round (kept, not decided), once in ten
	// rounds: the walk is over every connection's state.
	if len(s.Quiet) == 0 || p.round%10 == 0 {
		for tok := range p.conns {
			if !s.Live(seen, tok) {
				delete(p.conns, tok)
			}
		}
		for tok := range p.connStatus {
			if !s.Live(seen, tok) {
				delete(p.connStatus, tok)
			}
		}
		for id, w := range p.rtts {
			if w.round != p.round && !s.Quiet[w.token] {
				delete(p.rtts, id) // its subflow is gone
			}
		}
	}
	return out
}

// SkipsQuiet: an idle, unchanged connection keeps its decisions (its
// subflows' RTTs do not move without traffic; a stall needs data in
// flight, which makes a connection not quiet).
func (p *Prefer) SkipsQuiet() bool { return true }

// rtt is the subflow's RTT as the policy judges it (see RTTWindow).
func (p *Prefer) rtt(now, sampled time.Time, sf observe.Subflow) time.Duration {
	if p.RTTWindow <= 0 {
		return sf.SRTT
	}
	w := p.rtts[ID(sf)]
	if w == nil {
		w = &rttWindow{}
		p.rtts[ID(sf)] = w
	}
	w.round, w.token = p.round, sf.Token
	return w.add(now, sampled, sf.SRTT, p.RTTWindow)
}

func (p *Prefer) decideConn(now, sampled time.Time, c *Conn, rank map[netip.Addr]int, cs *PreferConnStatus) []Action {
	// The preferred subflows, with the RTT each is judged by.
	type judged struct {
		sf  observe.Subflow
		rtt time.Duration
	}
	var pref []judged
	var minRTT time.Duration
	for _, sf := range c.Subflows {
		r := p.rtt(now, sampled, sf)
		if _, ok := rank[sf.Local.Addr()]; ok {
			pref = append(pref, judged{sf, r})
		}
		if r > 0 && (minRTT == 0 || r < minRTT) {
			minRTT = r
		}
	}
	if len(rank) == 0 {
		// No preferred address on the host: for a connection that carried
		// on its preferred path, its interface went down (or lost the
		// address), an outage like a silent one, and the other paths are
		// held the same way (prefer_hold.go). Otherwise nothing to prefer.
		if st := p.conns[c.Token]; st != nil && st.everActive {
			cs.State = "preferred-address-gone"
			return p.holdOthers(now, sampled, c, st, rank, false)
		}
		cs.State = "no-preference"
		return nil
	}
	st := p.conns[c.Token]
	if st == nil {
		st = &preferConn{since: now, born: now}
		p.conns[c.Token] = st
	}
	if st.stalled == nil {
		st.stalled = map[SubflowID]bool{}
	}
	clear(st.stalled)
	if len(pref) == 0 {
		// The preferred path has not joined yet (a connection starts on the
		// route's path). Backup costs nothing while it is the only subflow
		// (the kernel uses a backup subflow when nothing else is usable),
		// and when the preferred subflow arrives, data moves at once.
		cs.State = "waiting-for-preferred-subflow"
		out := make([]Action, 0, len(c.Subflows))
		for _, sf := range c.Subflows {
			out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: true, Reason: "backup until a preferred subflow joins"})
		}
		return append(out, p.holdOthers(now, sampled, c, st, rank, false)...)
	}
	if len(pref) > 1 {
		sort.SliceStable(pref, func(i, j int) bool { return rank[pref[i].sf.Local.Addr()] < rank[pref[j].sf.Local.Addr()] })
	}
	delta := max(time.Duration(p.K*float64(minRTT)), p.MinDelta)
	cs.DeltaMs = float64(delta) / 1e6

	var chosen *observe.Subflow
	for i := range pref {
		ok, stall, why := p.viable(pref[i].sf, pref[i].rtt, delta)
		id := ID(pref[i].sf)
		cs.Subflows = append(cs.Subflows, fmt.Sprintf("%s preferred #%d: %s", id, rank[pref[i].sf.Local.Addr()]+1, why))
		st.stalled[id] = stall
		if ok && chosen == nil {
			chosen = &pref[i].sf
		}
	}
	stalled := st.stalled

	out := make([]Action, 0, len(c.Subflows))
	decide := func(sf observe.Subflow, backup bool, reason string) {
		out = append(out, Action{Kind: Backup, Token: c.Token, Subflow: ID(sf), Backup: backup, Reason: reason})
	}
	if chosen != nil {
		if !st.active || st.chosen != ID(*chosen) {
			st.active, st.chosen, st.since = true, ID(*chosen), now
			st.switches++
		}
		// A chosen subflow the daemon knows only from the path manager's
		// establishment event may still be completing its join: held
		// back as joining until the sample the event asks for shows it
		// (eventOnly, prefer_hold.go).
		joining := (chosen.JoinIncomplete() || eventOnly(*chosen)) && !st.outage.IsZero()
		if !joining {
			st.endOutage()
		}
		cs.State, cs.Chosen, cs.Switches = "preferred", ID(*chosen).String(), st.switches
		others := "backup while preferred subflow " + cs.Chosen + " is viable"
		for _, sf := range c.Subflows {
			if ID(sf) == ID(*chosen) {
				decide(sf, false, "preferred path viable: carries the data")
			} else {
				decide(sf, true, others)
			}
		}
		if joining {
			// It carries nothing before its join completes: the others
			// hold back for that round trip (prefer_hold.go).
			out = append(out, p.holdOthers(now, sampled, c, st, rank, true)...)
		}
		return out
	}

	// No preferred subflow is viable: the kernel's default behaviour,
	// except that a stalled preferred subflow is kept out of the way.
	if st.active {
		st.switches++
	}
	st.active, st.since = false, now
	cs.State, cs.Switches = "deactivated", st.switches
	for _, sf := range c.Subflows {
		if stalled[ID(sf)] {
			decide(sf, true, "deactivated (stalled): TCP retransmissions probe it")
		} else {
			decide(sf, false, "no preferred subflow is viable: kernel default")
		}
	}
	for _, s := range stalled {
		if s {
			return append(out, p.holdOthers(now, sampled, c, st, rank, false)...)
		}
	}
	// Slower than δ, not out: the other paths are not held.
	st.clearOutage()
	return out
}

// Status reports the last decisions.
func (p *Prefer) Status() any {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.status
	st.Conns = make([]PreferConnStatus, 0, len(p.connStatus))
	for _, cs := range p.connStatus {
		st.Conns = append(st.Conns, cs)
	}
	sort.Slice(st.Conns, func(i, j int) bool { return st.Conns[i].Token < st.Conns[j].Token })
	return st
}
