package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"

	"mpsteer/internal/lab/vethhosts"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
	"mpsteer/internal/stats"
)

// ReactionResult is the daemon's reaction to new subflows: from the
// kernel's "subflow established" event to the subflow being backup, as
// the peer sees it (its "subflow priority" event, after our MP_PRIO
// crossed the link). Both events are read by this harness with one clock.
type ReactionResult struct {
	Samples        int     `json:"samples"`
	MedianUs       float64 `json:"median_us"`
	P99Us          float64 `json:"p99_us"`
	MinUs          float64 `json:"min_us"`
	DaemonMedianUs float64 `json:"daemon_internal_median_us"`
	DaemonP99Us    float64 `json:"daemon_internal_p99_us"`
	PaperMptcpdUs  float64 `json:"emptcp_paper_mptcpd_us"`
	// One MPTCP_PM_CMD_SET_FLAGS call from this harness (no daemon): the
	// kernel sends the MP_PRIO inside the call, so this is the floor of
	// any path-manager-based reaction.
	SetFlagsMedianUs float64 `json:"set_flags_call_median_us"`
	TargetUs         float64 `json:"target_us"`
	Setup            string  `json:"setup"`
}

// next waits for an event that matches.
func next(l *pm.EventListener, match func(pm.Event) bool) (pm.Event, error) {
	deadline := time.Now().Add(5 * time.Second)
	l.SetDeadline(deadline)
	for time.Now().Before(deadline) {
		evs, err := l.Receive()
		if err != nil {
			return pm.Event{}, err
		}
		for _, ev := range evs {
			if match(ev) {
				return ev, nil
			}
		}
	}
	return pm.Event{}, errors.New("timed out waiting for an event")
}

// Reaction runs the real daemon binary in a namespace with the userspace
// path manager (each subflow's backup flag is its own there, as in the
// mptcpd plugin the eMPTCP paper timed) and a preference for the first
// path; the harness opens subflows on the second path, n times.
func Reaction(ctx context.Context, binary string, n int, progress func(string)) (*ReactionResult, error) {
	h, err := vethhosts.New(2)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	if err := netnsutil.SetPathManager(h.Client, "userspace"); err != nil {
		return nil, err
	}
	srv, err := pm.Dial(pm.Options{NetNSName: h.Server})
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	if err := srv.SetLimits(pm.Limits{AddAddrAccepted: 8, Subflows: 8}); err != nil {
		return nil, err
	}
	cl, err := pm.Dial(pm.Options{NetNSName: h.Client})
	if err != nil {
		return nil, err
	}
	defer cl.Close()

	// A slow tick: what is measured is the reaction to events.
	d, err := startDaemon(binary, h.Client, fmt.Sprintf("interval: 1s\npolicies:\n  - {name: prefer, paths: [%s], open_subflows: false}\n", h.ClientAddr(1)))
	if err != nil {
		return nil, err
	}
	defer d.stop()
	client := d.client

	cev, err := pm.ListenEvents(pm.Options{NetNSName: h.Client})
	if err != nil {
		return nil, err
	}
	defer cev.Close()
	sev, err := pm.ListenEvents(pm.Options{NetNSName: h.Server})
	if err != nil {
		return nil, err
	}
	defer sev.Close()

	remote := netip.AddrPortFrom(h.ServerAddr(1), 7200)
	var ln net.Listener
	if err := netnsutil.Do(h.Server, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(ctx, "tcp", remote.String())
		return err
	}); err != nil {
		return nil, err
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	var conn net.Conn
	if err := netnsutil.Do(h.Client, func() error {
		var d net.Dialer
		d.SetMultipathTCP(true)
		var err error
		conn, err = d.DialContext(ctx, "tcp", remote.String())
		return err
	}); err != nil {
		return nil, err
	}
	defer conn.Close()
	conn.Write(make([]byte, 4096))
	est, err := next(cev, func(e pm.Event) bool { return e.Type == pm.EventEstablished })
	if err != nil {
		return nil, fmt.Errorf("connection: %w", err)
	}
	token := est.Token
	local := pm.Endpoint{ID: 2, Addr: h.ClientAddr(2)}
	if err := cl.Announce(token, local); err != nil {
		return nil, err
	}

	progress(fmt.Sprintf("reaction: %d subflows, each made backup by the daemon", n))
	var lat []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		if err := cl.SubflowCreate(token, local, remote); err != nil {
			return nil, fmt.Errorf("subflow %d: %w", i, err)
		}
		up, err := next(cev, func(e pm.Event) bool {
			return e.Type == pm.EventSubEstablished && e.Local.Addr() == h.ClientAddr(2)
		})
		if err != nil {
			return nil, fmt.Errorf("subflow %d established: %w", i, err)
		}
		prio, err := next(sev, func(e pm.Event) bool {
			return e.Type == pm.EventSubPriority && e.Remote == up.Local && e.Backup
		})
		if err != nil {
			return nil, fmt.Errorf("subflow %d (%v → %v): the daemon did not make it backup: %w%s", i, up.Local, up.Remote, err, d.explain())
		}
		lat = append(lat, prio.Received.Sub(up.Received))
		if err := cl.SubflowDestroy(token, up.Local, up.Remote); err != nil {
			return nil, err
		}
		if _, err := next(cev, func(e pm.Event) bool { return e.Type == pm.EventSubClosed && e.Local == up.Local }); err != nil {
			return nil, err
		}
	}
	// The same action without the daemon: toggle the initial subflow.
	var calls []time.Duration
	first, second := conn.LocalAddr().(*net.TCPAddr).AddrPort(), conn.RemoteAddr().(*net.TCPAddr).AddrPort()
	for i := 0; i < 2*n && ctx.Err() == nil; i++ {
		f := pm.FlagBackup
		if i%2 == 1 {
			f = 0
		}
		t0 := time.Now()
		if err := cl.SetSubflowFlags(token, first, second, f); err != nil {
			return nil, fmt.Errorf("set flags on the initial subflow: %w", err)
		}
		calls = append(calls, time.Since(t0))
	}
	if len(lat) == 0 || len(calls) == 0 {
		return nil, fmt.Errorf("no samples: %w", ctx.Err())
	}
	us := func(d time.Duration) float64 { return float64(d) / 1e3 }
	lq := stats.Durations(lat, 0, 0.5, 0.99)
	cq := stats.Durations(calls, 0.5)
	r := &ReactionResult{Samples: len(lat), MedianUs: us(lq[1]), P99Us: us(lq[2]), MinUs: us(lq[0]),
		SetFlagsMedianUs: us(cq[0]), TargetUs: 50,
		PaperMptcpdUs: 145, Setup: "userspace path manager, veth, daemon with prefer; event: sub_established at the client; applied: sub_priority (backup) at the server"}
	if st, err := client.Status(); err == nil {
		r.DaemonMedianUs, r.DaemonP99Us = st.Reaction.MedianUs, st.Reaction.P99Us
	}
	return r, nil
}
