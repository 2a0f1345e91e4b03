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

// Status is what `mpsteer status` shows.
type Status struct {
	PID         int               `json:"pid"`
	NetNS       string            `json:"netns"`
	Config      string            `json:"config"`
	BackupVia   string            `json:"backup_via"`
	IntervalMs  float64           `json:"interval_ms"`
	Hint        []string          `json:"prefer_hint,omitempty"`
	Policies    []PolicyStatus    `json:"policies"`
	Connections []ConnStatus      `json:"connections"`
	Actions     []json.RawMessage `json:"recent_actions"`
	Reaction    Latency           `json:"reaction_latency"`
	RTO         map[string]uint64 `json:"rto_max_program,omitempty"`
	Chains      json.RawMessage   `json:"chains,omitempty"`
}

// PolicyStatus is one policy and its own explanation of its state.
type PolicyStatus struct {
	Name   string `json:"name"`
	Status any    `json:"status"`
}

// ConnStatus is one MPTCP connection.
type ConnStatus struct {
	Token    string          `json:"token"`
	Subflows []SubflowStatus `json:"subflows"`
}

// SubflowStatus is one subflow as the kernel reports it, and what the
// policies decided for it.
type SubflowStatus struct {
	Local        string    `json:"local"`
	Remote       string    `json:"remote"`
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
}

// Decision is a policy's verdict on a subflow.
type Decision struct {
	Policy string `json:"policy"`
	Backup bool   `json:"backup"`
	Reason string `json:"reason"`
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
