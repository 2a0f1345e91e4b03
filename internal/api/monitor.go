package api

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"
)

// MonitorPath streams what the daemon sees and does as newline-delimited
// JSON, one MonitorEvent per line, until the client goes away.
const MonitorPath = "/v1/monitor"

// Monitor event types.
const (
	MonitorHello    = "hello"    // the first line: who is answering
	MonitorPM       = "pm"       // a path-manager event from the kernel
	MonitorAction   = "action"   // an action the daemon took, and its outcome
	MonitorDecision = "decision" // a policy's verdict on a subflow changed
	MonitorReload   = "reload"   // a config reload, applied or refused
	MonitorDropped  = "dropped"  // this client was too slow: events were lost
)

// MonitorEvent is one line of the stream. Which fields are set depends on
// Type; docs/daemon.md ("Monitor") lists them.
type MonitorEvent struct {
	At   time.Time `json:"at"`
	Type string    `json:"type"`
	// pm: the event's name (created, established, closed, announced,
	// removed, sub_established, sub_closed, sub_priority,
	// listener_created, listener_closed) and attributes.
	Event       string `json:"event,omitempty"`
	Token       string `json:"token,omitempty"`
	Local       string `json:"local,omitempty"`
	Remote      string `json:"remote,omitempty"`
	LocalID     *uint8 `json:"local_id,omitempty"`
	RemoteID    *uint8 `json:"remote_id,omitempty"`
	Backup      *bool  `json:"backup,omitempty"`
	ServerSide  bool   `json:"server_side,omitempty"`
	Errno       uint8  `json:"error,omitempty"`
	ResetReason uint32 `json:"reset_reason,omitempty"`
	// action: the record, as status shows it.
	Action *ActionRecord `json:"action,omitempty"`
	// decision: the policy, the subflow ("LOCAL:PORT→REMOTE:PORT"), the
	// verdict (backup, active, "capped RATE", or none when no policy has
	// an opinion any more) and why.
	Policy   string `json:"policy,omitempty"`
	Subflow  string `json:"subflow,omitempty"`
	Decision string `json:"decision,omitempty"`
	Reason   string `json:"reason,omitempty"`
	// reload: what asked for it (SIGHUP, policy apply, config file
	// changed), whether it was applied, and the daemon's message or error.
	Trigger string `json:"trigger,omitempty"`
	Applied *bool  `json:"applied,omitempty"`
	Message string `json:"message,omitempty"`
	// hello: the daemon's pid and network namespace.
	PID   int    `json:"pid,omitempty"`
	NetNS string `json:"netns,omitempty"`
	// dropped: how many events this client missed.
	Dropped int `json:"dropped,omitempty"`
}

// String is the event in one line, for people.
func (e MonitorEvent) String() string {
	ts := e.At.Local().Format("15:04:05.000")
	switch e.Type {
	case MonitorPM:
		s := fmt.Sprintf("%s [%s] token %s", ts, strings.ToUpper(e.Event), e.Token)
		if e.Local != "" || e.Remote != "" {
			s += fmt.Sprintf(" %s → %s", orDash(e.Local), orDash(e.Remote))
		}
		if e.LocalID != nil && e.RemoteID != nil {
			s += fmt.Sprintf(" ids %d/%d", *e.LocalID, *e.RemoteID)
		}
		if e.Backup != nil && *e.Backup {
			s += " backup"
		}
		if e.ServerSide {
			s += " server-side"
		}
		if e.Errno != 0 {
			s += fmt.Sprintf(" error %d", e.Errno)
		}
		if e.ResetReason != 0 {
			s += fmt.Sprintf(" reset-reason %d", e.ResetReason)
		}
		return s
	case MonitorAction:
		if e.Action == nil {
			return ts + " [ACTION]"
		}
		return ts + " [ACTION] " + e.Action.String()
	case MonitorDecision:
		return fmt.Sprintf("%s [DECISION] %s: %s %s — %s", ts, e.Policy, e.Subflow, e.Decision, e.Reason)
	case MonitorReload:
		verdict := "applied"
		if e.Applied != nil && !*e.Applied {
			verdict = "REFUSED, the old config stays"
		}
		return fmt.Sprintf("%s [RELOAD] %s: %s: %s", ts, e.Trigger, verdict, e.Message)
	case MonitorHello:
		return fmt.Sprintf("%s monitoring the daemon pid %d in netns %s (Ctrl-C to stop)", ts, e.PID, e.NetNS)
	case MonitorDropped:
		return fmt.Sprintf("%s [DROPPED] %d events lost: this client read too slowly", ts, e.Dropped)
	}
	b, _ := json.Marshal(e)
	return ts + " " + string(b)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Monitor streams the daemon's events to fn until ctx ends, fn returns an
// error, or the daemon goes away (io.EOF).
func (c *Client) Monitor(ctx context.Context, fn func(MonitorEvent) error) error {
	// No overall timeout: the stream lasts as long as the caller wants.
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", c.socket)
	}}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://mpsteer"+MonitorPath, nil)
	if err != nil {
		return err
	}
	resp, err := hc.Do(req)
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
	if resp.StatusCode >= 300 {
		data, _ := io.ReadAll(resp.Body)
		var r Reply
		if json.Unmarshal(data, &r) == nil && r.Error != "" {
			return errors.New(r.Error)
		}
		return fmt.Errorf("daemon answered %s: %s", resp.Status, strings.TrimSpace(string(data)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		var ev MonitorEvent
		if err := json.Unmarshal(sc.Bytes(), &ev); err != nil {
			return fmt.Errorf("monitor stream: %w", err)
		}
		if err := fn(ev); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, syscall.ECONNRESET) {
		return err // a daemon that stops closes the stream abruptly: that is its end
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return io.EOF
}
