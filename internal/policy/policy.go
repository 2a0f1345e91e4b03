// Package policy is mpsteer's decision logic, kept pure: a policy reads
// snapshots of the kernel's MPTCP state (connections and subflows as plain
// values, with the snapshot's time) and returns actions from one typed set
// (action.go). It never calls netlink or BPF, so each paper's algorithm
// stays small and is tested with recorded samples and a fake clock.
package policy

import (
	"fmt"
	"net/netip"
	"time"

	"mpsteer/internal/observe"
)

// SubflowID names a subflow by its addresses and ports. It is a key of
// the maps every round fills per subflow (plans, windows, actuators'
// views), so it is plain bytes: hashed and compared in one go, where
// netip.AddrPort's hash goes field by field.
type SubflowID struct {
	Local, Remote Endpoint
}

func (id SubflowID) String() string { return id.Local.String() + "→" + id.Remote.String() }

// ID returns the identity of a sampled subflow.
func ID(sf observe.Subflow) SubflowID { return NewSubflowID(sf.Local, sf.Remote) }

// NewSubflowID is the identity of the subflow between local and remote.
func NewSubflowID(local, remote netip.AddrPort) SubflowID {
	return SubflowID{EndpointOf(local), EndpointOf(remote)}
}

// Endpoint is an address and port (zone-less, IPv4-mapped IPv6 as IPv4)
// in a form without pointers or padding.
type Endpoint struct {
	addr [16]byte
	port uint16
	kind uint16 // 0 invalid, 4 IPv4, 6 IPv6
}

// EndpointOf converts an address and port.
func EndpointOf(ap netip.AddrPort) Endpoint {
	a := ap.Addr()
	switch {
	case a.Is4() || a.Is4In6(): // As16 gives both the mapped form
		return Endpoint{addr: a.As16(), port: ap.Port(), kind: 4}
	case a.Is6():
		return Endpoint{addr: a.As16(), port: ap.Port(), kind: 6}
	}
	return Endpoint{}
}

// AddrPort is the endpoint as a netip.AddrPort.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.Addr(), e.port) }

// Addr is the endpoint's address (invalid for the zero Endpoint).
func (e Endpoint) Addr() netip.Addr {
	switch e.kind {
	case 4:
		return netip.AddrFrom16(e.addr).Unmap()
	case 6:
		return netip.AddrFrom16(e.addr)
	}
	return netip.Addr{}
}

// Port is the endpoint's port.
func (e Endpoint) Port() uint16 { return e.port }

// IsValid reports whether the endpoint has an address.
func (e Endpoint) IsValid() bool { return e.kind != 0 }

func (e Endpoint) String() string { return e.AddrPort().String() }

// Conn is one MPTCP connection and its subflows.
type Conn struct {
	Token uint32
	// Subflows are the established subflows; Pending are those still
	// joining (SYN sent, not yet established).
	Subflows []observe.Subflow
	Pending  []observe.Subflow
	// Local and Remote are the connection's own addresses (its initial
	// subflow's); invalid when unknown.
	Local, Remote netip.AddrPort
	// ServerSide: the peer opened the connection. Known from the path
	// manager's events, else guessed (see observe.ConnEvents).
	ServerSide bool
	// Established: MPTCP is fully established on the connection (its
	// established event came, or data was acknowledged or received at
	// the connection level); before that the kernel refuses new
	// subflows and announcements.
	Established bool
	// RemoteAddrs are the addresses the peer announced (ADD_ADDR), by id.
	RemoteAddrs map[uint8]netip.AddrPort
	// Closed lists subflows that closed recently, with the kernel's reason.
	Closed []observe.ClosedSubflow
	// BytesAcked is acknowledged at the connection level (MPTCP DATA_ACK:
	// what the receiver got in order); 0 when unknown. BytesSent and
	// BytesRecv are the connection's data sent and received.
	BytesAcked, BytesSent, BytesRecv uint64
	// Health is what the peer last reported about each path of the
	// connection (receiver-assisted path health, RAMPTCP; health.go);
	// none when it sends no reports.
	Health []PathHealth
	// Cgroup is the cgroup v2 path (from the hierarchy's root, e.g.
	// /system.slice/foo.service) of the process that made the connection's
	// socket; "" when unknown. The daemon resolves only the cgroups at or
	// below those a policy is scoped to (scope.go); CgroupID is the id
	// the kernel reports (0 when unknown).
	Cgroup   string
	CgroupID uint64
}

// Snapshot is what policies see: the time, the connections, and what
// became of the actions applied since the last snapshot.
type Snapshot struct {
	Now time.Time
	// Sampled is when the subflows' figures were read from the kernel:
	// Now for a sample's round, the last sample's time when the daemon
	// decides again between samples (an event). Zero: at Now.
	Sampled  time.Time
	Conns    []*Conn
	Outcomes []Outcome
	// Quiet are connections that exist but are not in Conns this round:
	// idle (nothing in flight or queued) and unchanged since they were
	// last decided. Only policies that say they can (QuietAware) get such
	// rounds; they keep the state of a quiet connection, and the daemon
	// keeps its last decisions.
	Quiet map[uint32]bool
	// QuietSubflows counts the quiet connections' subflows (the plan is
	// sized for them too: the daemon adds their last decisions).
	QuietSubflows int
}

// Live reports whether a connection is in the round: decided (in Conns)
// or quiet. A policy forgets what it keeps for a connection that is not.
func (s *Snapshot) Live(decided map[uint32]bool, tok uint32) bool {
	return decided[tok] || s.Quiet[tok]
}

// QuietAware is a policy that may be handed rounds without the quiet
// connections (Snapshot.Quiet): its decisions on an idle, unchanged
// connection stay right for a while without deciding again.
type QuietAware interface {
	SkipsQuiet() bool
}

// QuietAware reports whether every policy may be handed rounds without
// the quiet connections.
func (e *Engine) QuietAware() bool {
	for _, p := range e.Policies {
		if q, ok := p.(QuietAware); !ok || !q.SkipsQuiet() {
			return false
		}
	}
	return len(e.Policies) > 0
}

// keepQuiet appends to cur the entries of prev (a status of the last
// round) that belong to quiet connections: a status rebuilt from a round
// without them keeps showing them.
func keepQuiet[T any](s *Snapshot, cur, prev []T, token func(T) string) []T {
	if len(s.Quiet) == 0 {
		return cur
	}
	quiet := make(map[string]bool, len(s.Quiet))
	for tok := range s.Quiet {
		quiet[fmt.Sprintf("%08x", tok)] = true
	}
	for _, e := range prev {
		if quiet[token(e)] {
			cur = append(cur, e)
		}
	}
	return cur
}

// Policy is one algorithm.
type Policy interface {
	Name() string
	// Decide returns the actions it wants now. Backup actions are
	// decisions: a policy returns one for every subflow it has an opinion
	// on, every round. Other actions are acted on once each time they are
	// returned: a policy returns them when it wants them done.
	Decide(s *Snapshot) []Action
	// Status explains the policy's current state (for `mpsteer status`).
	Status() any
}

// Requirements are settings a policy needs outside per-subflow decisions.
type Requirements struct {
	// RTOMax caps the retransmission timeout of subflows from these local
	// addresses (TCP_RTO_MAX_MS, set by a BPF sockops program).
	RTOMax map[netip.Addr]time.Duration
	// SynRTO sets the SYN timeout of subflows joining from these local
	// addresses (BPF_SOCK_OPS_TIMEOUT_INIT, the same sockops program): a
	// probe of a silent path retransmits its SYN this often.
	SynRTO map[netip.Addr]time.Duration
	// InitialAvoid: no connection opens its initial subflow from these
	// local addresses (the user marked their paths volatile); unbound
	// connections are bound to InitialAddr instead (invalid: left alone).
	InitialAvoid []netip.Addr
	InitialAddr  netip.Addr
	// Limits: the policy caps subflows' rates, so the means to do it must
	// be in place before subflows are established (a sockops program sees
	// only subflows established after it is attached).
	Limits bool
	// HealthReports: the policy reads the peer's path-health reports
	// (Conn.Health): the sockops program that reads them must be in place
	// before subflows are established, and the daemon decides again as
	// soon as a report changes, not only every interval.
	HealthReports bool
	// NotSentLowat caps the data MPTCP queues, unsent, on each subflow
	// (TCP_NOTSENT_LOWAT, bytes; set with the health reports' program on
	// subflows established after it): a path set backup then has little
	// queued that it must still carry. 0: left alone.
	NotSentLowat int
	// NotSentLowatExcept: congestion controls whose subflows NotSentLowat
	// leaves alone (at most MaxLowatExcept; it comes with the NotSentLowat
	// of the policy that asked for it).
	NotSentLowatExcept []string
	// JoinBackup: new subflows should join as backup (carry nothing until
	// a decision lets them). Under the kernel path manager with backup via
	// endpoints, endpoints that open subflows are kept backup while no
	// decision wants their address usable; elsewhere the first decision,
	// taken when the subflow's establishment event arrives, does it.
	JoinBackup bool
	// BackupAddrs: local addresses whose every subflow a policy keeps
	// backup, whatever the connection. Under the kernel path manager with
	// backup via endpoints, their endpoints are flagged backup before any
	// connection uses them, so that a join from one carries the B bit from
	// its first packet rather than until the daemon's next round. Each
	// address names the policy that asks.
	BackupAddrs map[netip.Addr]string
	// Coupled: the MPTCP subflows of each scope's connections run a
	// coupled congestion control (coupled.go), in the order given.
	Coupled []CoupledScope
	// SampleOnJoin: the policy acts on a join's SYN/ACK (a subflow in the
	// connection whose join has not completed): the daemon takes a sample
	// as soon as a subflow's establishment event arrives, not at the next
	// interval.
	SampleOnJoin bool
	// BBRState: the policy reads BBR's own state (observe.Subflow.BBR),
	// which only the BPF iterator gives: the daemon reads subflows with it
	// while a policy asks, whatever its reads cost against sock_diag.
	BBRState bool
}

// Requirer is implemented by policies with Requirements.
type Requirer interface {
	Requirements() Requirements
}

// Env is what a policy may ask of its host while it is built or decides.
type Env struct {
	// Addrs resolves an interface name to its addresses; ok is false when
	// there is no such interface.
	Addrs func(iface string) (addrs []netip.Addr, ok bool)
	// Interfaces lists the host's interfaces (loopback excluded) with
	// their addresses.
	Interfaces func() map[string][]netip.Addr
	// PathManager is the namespace's path manager, "kernel" or
	// "userspace"; "" when unknown (a scenario checked off the host).
	PathManager string
	// SynLinearTimeouts is the namespace's
	// net.ipv4.tcp_syn_linear_timeouts: how many times a SYN is
	// retransmitted at its first timeout before the timeout doubles
	// (kernels before 6.5 have none: 0). Read only when SynLinearKnown;
	// unknown is taken as the kernel's default, 4.
	SynLinearTimeouts int
	SynLinearKnown    bool
	// Tick is the kernel's timer tick (1/CONFIG_HZ), the unit it counts
	// a SYN timeout in; 0 when unknown, taken as 4 ms (HZ 250, Debian's
	// and Ubuntu's kernels).
	Tick time.Duration
	// SelectUserspace is the sysctl setting that selects the userspace
	// path manager on the host's kernel (net.mptcp.path_manager=userspace,
	// or net.mptcp.pm_type=1 before Linux 6.15); "" when unknown.
	SelectUserspace string
}

// tick is the kernel's timer tick (see Tick).
func (e Env) tick() time.Duration {
	if e.Tick > 0 {
		return e.Tick
	}
	return 4 * time.Millisecond
}

// UserspacePMSetting says how to select the userspace path manager: the
// host's sysctl setting where it is known, else both kernels' ways.
func (e Env) UserspacePMSetting() string {
	if e.SelectUserspace != "" {
		return e.SelectUserspace
	}
	return "net.mptcp.path_manager=userspace (Linux 6.15 on; net.mptcp.pm_type=1 before)"
}

// Path managers (Env.PathManager).
const (
	KernelPM    = "kernel"
	UserspacePM = "userspace"
)

// Engine runs policies in order; for a subflow's backup flag and its rate
// cap, the first policy with an opinion decides.
type Engine struct {
	Policies []Policy
}

// Decide runs every policy once and merges their actions into a plan.
func (e *Engine) Decide(s *Snapshot) Plan {
	var out Plan
	e.DecideInto(s, &out)
	return out
}

// DecideInto is Decide into out, whose maps are emptied and filled again
// (a daemon deciding every interval reuses an old plan's: no new maps of
// thousands of entries per round).
func (e *Engine) DecideInto(s *Snapshot, out *Plan) {
	n := s.QuietSubflows
	for _, c := range s.Conns {
		n += len(c.Subflows) + len(c.Pending)
	}
	if out.Backup == nil {
		// Sized for a decision per subflow: filled without growing.
		out.Backup = make(map[SubflowID]Action, n)
	}
	if out.Limits == nil {
		out.Limits = map[SubflowID]Action{}
	}
	clear(out.Backup)
	clear(out.Limits)
	out.Lifecycle = out.Lifecycle[:0]
	seen := map[string]bool{}
	for _, p := range e.Policies {
		for _, a := range p.Decide(s) {
			a.Policy = p.Name()
			if a.Kind.decision() {
				m := out.Backup
				if a.Kind == Limit {
					m = out.Limits
				}
				if _, taken := m[a.Subflow]; !taken {
					m[a.Subflow] = a
				}
				continue
			}
			key := fmt.Sprintf("%s %08x %s", a.Kind, a.Token, a.Target())
			if seen[key] && a.Kind != Create {
				continue // two policies asking for the same thing: once
			}
			seen[key] = true
			out.Lifecycle = append(out.Lifecycle, a)
		}
	}
	return
}

// Requirements merges every policy's requirements (first policy wins).
func (e *Engine) Requirements() Requirements {
	r := Requirements{RTOMax: map[netip.Addr]time.Duration{}, SynRTO: map[netip.Addr]time.Duration{}, BackupAddrs: map[netip.Addr]string{}}
	for _, p := range e.Policies {
		q, ok := p.(Requirer)
		if !ok {
			continue
		}
		req := q.Requirements()
		r.Limits = r.Limits || req.Limits
		r.HealthReports = r.HealthReports || req.HealthReports
		r.JoinBackup = r.JoinBackup || req.JoinBackup
		r.BBRState = r.BBRState || req.BBRState
		r.SampleOnJoin = r.SampleOnJoin || req.SampleOnJoin
		for a, who := range req.BackupAddrs {
			if _, taken := r.BackupAddrs[a]; !taken {
				r.BackupAddrs[a] = who
			}
		}
		if r.NotSentLowat == 0 {
			r.NotSentLowat, r.NotSentLowatExcept = req.NotSentLowat, req.NotSentLowatExcept
		}
		for a, d := range req.RTOMax {
			if _, taken := r.RTOMax[a]; !taken {
				r.RTOMax[a] = d
			}
		}
		for a, d := range req.SynRTO {
			if _, taken := r.SynRTO[a]; !taken {
				r.SynRTO[a] = d
			}
		}
		if !r.InitialAddr.IsValid() && len(r.InitialAvoid) == 0 {
			r.InitialAvoid, r.InitialAddr = req.InitialAvoid, req.InitialAddr
		}
		r.Coupled = append(r.Coupled, req.Coupled...)
	}
	return r
}

// Get returns the policy with this name, or nil.
func (e *Engine) Get(name string) Policy {
	for _, p := range e.Policies {
		if p.Name() == name {
			return p
		}
	}
	return nil
}

func fmtMs(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/1e6) }

func mbit(bps float64) string { return fmt.Sprintf("%.1fMbit/s", bps*8/1e6) }

// MarshalText writes the endpoint as netip.AddrPort does ("" when invalid).
func (e Endpoint) MarshalText() ([]byte, error) {
	if !e.IsValid() {
		return []byte{}, nil
	}
	return e.AddrPort().MarshalText()
}

// UnmarshalText reads what MarshalText writes.
func (e *Endpoint) UnmarshalText(b []byte) error {
	var ap netip.AddrPort
	if err := ap.UnmarshalText(b); err != nil {
		return err
	}
	*e = EndpointOf(ap)
	return nil
}
