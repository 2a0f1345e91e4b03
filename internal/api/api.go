// Package api is the protocol between the mpsteer daemon and its CLI:
// JSON over HTTP on a root-only unix socket.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// SocketDir holds the daemons' sockets.
const SocketDir = "/run/mpsteer"

// DefaultSocket is where the daemon of the caller's network namespace
// listens unless told otherwise: SocketDir/mpsteer.sock in the host's own
// namespace (the one process 1 is in), SocketDir/netns-INODE.sock in any
// other. /run is shared by every namespace, and one daemon runs per
// namespace: a CLI run with `ip netns exec B` must reach B's daemon, never
// the host's.
func DefaultSocket() string {
	self, err := netnsInode("/proc/self/ns/net")
	if err != nil {
		return filepath.Join(SocketDir, "mpsteer.sock")
	}
	if init, err := netnsInode("/proc/1/ns/net"); err == nil && init == self {
		return filepath.Join(SocketDir, "mpsteer.sock")
	}
	return filepath.Join(SocketDir, fmt.Sprintf("netns-%d.sock", self))
}

func netnsInode(path string) (uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		return 0, err
	}
	return st.Ino, nil
}

// Status is what `mpsteer status` shows; docs/daemon.md describes each
// field.
type Status struct {
	PID         int            `json:"pid"`
	NetNS       string         `json:"netns"`
	Config      string         `json:"config"`
	PathManager string         `json:"path_manager"`
	BackupVia   string         `json:"backup_via"`
	IntervalMs  float64        `json:"interval_ms"`
	Hint        []string       `json:"prefer_hint,omitempty"`
	Policies    []PolicyStatus `json:"policies"`
	Connections []ConnStatus   `json:"connections"`
	// Actions are the daemon's last RecentActions action records.
	Actions  []ActionRecord    `json:"recent_actions"`
	Reaction Latency           `json:"reaction_latency"`
	RTO      map[string]uint64 `json:"rto_max_program,omitempty"`
	// AvoidInitial is prefer's avoid_initial program, when loaded: the
	// address connections start from and its counters.
	AvoidInitial map[string]any    `json:"avoid_initial_program,omitempty"`
	RateProgram  map[string]uint64 `json:"rate_program,omitempty"`
	// Coupled are the coupled congestion controls in use, by algorithm:
	// the name each is registered under, the cgroups whose MPTCP
	// subflows run it, and its counters (or why it could not be loaded).
	Coupled map[string]any  `json:"coupled_cc,omitempty"`
	Chains  json.RawMessage `json:"chains,omitempty"`
	// Health is the path-health reports' program (RAMPTCP), when in use.
	Health *HealthStatus `json:"path_health,omitempty"`
	// Mptcpize: the cgroups whose applications get MPTCP, when any.
	Mptcpize *MptcpizeStatus `json:"mptcpize,omitempty"`
	// Endpoints are the kernel path manager's endpoints the daemon
	// manages or has seen another manager change (backup via endpoint).
	Endpoints []EndpointStatus `json:"endpoints,omitempty"`
	// Loop is the reconcile loop's own state.
	Loop *LoopStatus `json:"loop,omitempty"`
	// StateError: what the daemon changed could not be kept on disk (or
	// the last daemon's state could not be read): a crash would leave
	// changes behind that no daemon undoes.
	StateError string `json:"state_error,omitempty"`
	// StateFile is where the daemon keeps what it must undo after a crash.
	StateFile string `json:"state_file,omitempty"`
}

// EndpointStatus is one endpoint of the kernel path manager as the daemon
// sees it.
type EndpointStatus struct {
	Addr  string `json:"addr"`
	ID    uint8  `json:"id,omitempty"`
	Flags string `json:"flags"`
	// Managed: the daemon may change its flags (a policy decides on its
	// address and the config does not leave it to others); Owned: the
	// daemon created it and removes it when no policy needs it.
	Managed bool `json:"managed"`
	Owned   bool `json:"owned,omitempty"`
	// Want is the backup flag the policies want ("" when none decides).
	Want string `json:"want,omitempty"`
	// Yielded: another manager changed the flag the daemon had set; the
	// daemon leaves it until its own decision changes.
	Yielded bool   `json:"yielded,omitempty"`
	Reason  string `json:"reason,omitempty"`
}

// LoopStatus is the reconcile loop: its rounds and what started them.
type LoopStatus struct {
	Rounds   uint64            `json:"rounds"`
	Triggers map[string]uint64 `json:"triggers"`
	// Stopped: the loop has ended (the daemon is exiting); it applies
	// nothing any more.
	Stopped bool `json:"stopped,omitempty"`
	// HealthPolls counts the reads of the path-health reports.
	HealthPolls uint64 `json:"health_polls"`
	// Unknown: the last observation of the connections failed; the
	// daemon kept what it knew rather than take them for gone.
	ConnsUnknown bool `json:"conns_unknown,omitempty"`
}

// MptcpizeStatus is the program that makes the TCP sockets of chosen
// cgroups' applications MPTCP.
type MptcpizeStatus struct {
	Cgroups []CgroupStatus `json:"cgroups"`
	// Program holds its counters: streams (TCP stream sockets made in the
	// namespace since it was attached), switched (those made MPTCP).
	Program map[string]uint64 `json:"program,omitempty"`
	Error   string            `json:"error,omitempty"`
}

// CgroupStatus is one cgroup the config names: its id while it exists.
type CgroupStatus struct {
	Path    string `json:"path"`
	ID      uint64 `json:"id,omitempty"`
	Present bool   `json:"present"`
}

// HealthStatus is the path-health reports' program and last-hop source.
type HealthStatus struct {
	// Report: this host reports its paths' health; Parse: it reads its
	// peers' reports.
	Report bool   `json:"report"`
	Parse  bool   `json:"parse"`
	Source string `json:"source,omitempty"` // transport, lab, wifi
	Error  string `json:"error,omitempty"`
	// SourceError is the last-hop source's last error.
	SourceError string `json:"source_error,omitempty"`
	// Program holds the program's counters: subflows, acks (pure ACKs
	// that could carry a report), written (with every path), partial (not
	// every path fitted), no_room, no_info, store_failed, segments, holes,
	// duplicates, no_slot, parsed, entries, bad_entries, malformed.
	Program map[string]uint64 `json:"program,omitempty"`
	// FitPct is the share of the ACKs with something to report that
	// carried a report.
	FitPct *float64 `json:"fit_pct,omitempty"`
	// Reactions counts the rounds decided because a report changed.
	Reactions int `json:"reactions"`
}

// PathReport is a path-health report on a subflow's path: the last one
// the peer sent (direction "received"), or the last hop this host
// reports to its peer ("sent").
type PathReport struct {
	Direction  string    `json:"direction"`
	LossPct    *float64  `json:"loss_pct,omitempty"`
	LastHopPct *float64  `json:"last_hop_pct,omitempty"`
	At         time.Time `json:"at"`
	AgeMs      float64   `json:"age_ms"`
	Reports    uint32    `json:"reports,omitempty"`
	// Via is the subflow a received report came on ("local id→remote id").
	Via string `json:"via,omitempty"`
	// Iface and Detail: the last hop a sent report describes.
	Iface  string `json:"iface,omitempty"`
	Detail string `json:"detail,omitempty"`
}

// PolicyStatus is one policy and its own explanation of its state (each
// policy's shape is its own; see docs/daemon.md).
type PolicyStatus struct {
	Name   string `json:"name"`
	Status any    `json:"status"`
}

// ConnStatus is one MPTCP connection.
type ConnStatus struct {
	Token string `json:"token"`
	// Local and Remote are the connection's own (initial) addresses.
	Local      string `json:"local,omitempty"`
	Remote     string `json:"remote,omitempty"`
	ServerSide bool   `json:"server_side"`
	// RemoteAddrs are the addresses the peer announced, "id=addr:port".
	RemoteAddrs []string `json:"remote_addrs,omitempty"`
	// Cgroup is the cgroup of the process that made the connection's
	// socket, when it lies at or below a cgroup a policy is scoped to;
	// CgroupID is the kernel's id of it in every case (0: unknown).
	Cgroup   string `json:"cgroup,omitempty"`
	CgroupID uint64 `json:"cgroup_id,omitempty"`
	// Steering says how a policy that steers connections by rules (the
	// atsss section) steers this one: its rule, its mode, and what each
	// access does and why.
	Steering []string        `json:"steering,omitempty"`
	Subflows []SubflowStatus `json:"subflows"`
	// Actions are the recent actions on this connection other than
	// backup flags (subflows created, destroyed, addresses announced),
	// each with its policy, reason and result.
	Actions []ActionRecord `json:"actions,omitempty"`
}

// SubflowStatus is one subflow as the kernel reports it, and what the
// policies decided for it.
type SubflowStatus struct {
	Local        string    `json:"local"`
	Remote       string    `json:"remote"`
	State        string    `json:"state"` // established, syn-sent, …
	LocalID      uint8     `json:"local_id"`
	RemoteID     uint8     `json:"remote_id"`
	BackupLocal  bool      `json:"backup_local"`
	BackupRemote bool      `json:"backup_remote"`
	SRTTMs       float64   `json:"srtt_ms"`
	Cwnd         uint32    `json:"cwnd_pkts"`
	DeliveryMbit float64   `json:"delivery_rate_mbit"`
	BytesAcked   uint64    `json:"bytes_acked"`
	Retransmits  uint32    `json:"retransmits"`
	Decision     *Decision `json:"decision,omitempty"`
	// Cap is the rate cap a policy set on the subflow, if any.
	Cap *Cap `json:"cap,omitempty"`
	// Health is the path-health report on the subflow's path, if any.
	Health *PathReport `json:"health,omitempty"`
}

// Cap is a policy's rate cap on a subflow.
type Cap struct {
	Policy string `json:"policy"`
	Rate   string `json:"rate"`
	Reason string `json:"reason"`
}

// Decision is a policy's verdict on a subflow's backup flag.
type Decision struct {
	Policy string `json:"policy"`
	Backup bool   `json:"backup"`
	Reason string `json:"reason"`
}

// RecentActions is how many action records the status keeps (the last).
const RecentActions = 100

// ActionRecord is one action the daemon took and what became of it.
type ActionRecord struct {
	At time.Time `json:"at"`
	// Policy asked for it; empty for the daemon's own housekeeping
	// (endpoints it owns, restoring flags on exit).
	Policy string `json:"policy,omitempty"`
	// Kind is one of backup, limit, create, destroy, announce, withdraw, or
	// endpoint (the daemon's changes to path-manager endpoints).
	Kind   string `json:"kind"`
	Token  string `json:"token,omitempty"`
	Target string `json:"target"` // a subflow "local→remote", an address or an endpoint
	Backup *bool  `json:"backup,omitempty"`
	// Rate is the cap a limit action set ("10mbit", or "none" lifted).
	Rate string `json:"rate,omitempty"`
	// Result is applied, refused (by the kernel; Error says why) or
	// unsupported (the path manager in charge cannot do it).
	Result string `json:"result"`
	Error  string `json:"error,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// String is the record in one line, for logs and the CLI.
func (a ActionRecord) String() string {
	s := a.Kind
	if a.Backup != nil {
		s = fmt.Sprintf("%s=%v", a.Kind, *a.Backup)
	}
	if a.Rate != "" {
		s = fmt.Sprintf("%s=%s", a.Kind, a.Rate)
	}
	s += " " + a.Target
	if a.Token != "" {
		s += " (connection " + a.Token + ")"
	}
	switch a.Result {
	case "applied":
	case "":
	default:
		s += ": " + strings.ToUpper(a.Result)
		if a.Error != "" {
			s += ": " + a.Error
		}
	}
	if a.Reason != "" {
		who := a.Policy
		if who == "" {
			who = "daemon"
		}
		s += " — " + who + ": " + a.Reason
	}
	return s
}

// Latency summarises reaction times (kernel event received → action done).
type Latency struct {
	Count    int     `json:"count"`
	MedianUs float64 `json:"median_us"`
	P99Us    float64 `json:"p99_us"`
}

// PreferRequest sets or clears the user's path preference.
type PreferRequest struct {
	Targets []string `json:"targets,omitempty"`
	Clear   bool     `json:"clear,omitempty"`
}

// ApplyRequest replaces the policies with a new config.
type ApplyRequest struct {
	File   string `json:"file"`
	Config string `json:"config"`
}

// Reply is the answer to a change.
type Reply struct {
	OK      bool   `json:"ok"`
	Message string `json:"message,omitempty"`
	Error   string `json:"error,omitempty"`
}

// Client talks to a daemon.
type Client struct {
	socket string
	http   *http.Client
}

// NewClient connects to the daemon's socket (DefaultSocket() if empty).
func NewClient(socket string) *Client {
	if socket == "" {
		socket = DefaultSocket()
	}
	return &Client{socket: socket, http: &http.Client{
		Timeout: 30 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", socket)
		}},
	}}
}

// Do sends a request and decodes the answer into out.
func (c *Client) Do(method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return err
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://mpsteer"+path, body)
	if err != nil {
		return err
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("no mpsteer daemon is listening on %s (start one with `mpsteer daemon --config FILE`)", c.socket)
		}
		if errors.Is(err, os.ErrPermission) || errors.Is(err, syscall.EACCES) {
			return fmt.Errorf("the daemon's socket %s is root-only: run as root", c.socket)
		}
		return err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		var r Reply
		if json.Unmarshal(data, &r) == nil && r.Error != "" {
			return errors.New(r.Error)
		}
		return fmt.Errorf("daemon answered %s: %s", resp.Status, bytes.TrimSpace(data))
	}
	if out != nil {
		return json.Unmarshal(data, out)
	}
	return nil
}

// Status fetches the daemon's status.
func (c *Client) Status() (*Status, error) {
	var s Status
	return &s, c.Do(http.MethodGet, "/v1/status", nil, &s)
}

// Prefer sets or clears the preference.
func (c *Client) Prefer(r PreferRequest) (*Reply, error) {
	var out Reply
	return &out, c.Do(http.MethodPost, "/v1/prefer", r, &out)
}

// Apply swaps the policies.
func (c *Client) Apply(r ApplyRequest) (*Reply, error) {
	var out Reply
	return &out, c.Do(http.MethodPost, "/v1/policies", r, &out)
}

// CloseIdleConnections closes the connections the client keeps open
// between requests.
func (c *Client) CloseIdleConnections() { c.http.CloseIdleConnections() }
