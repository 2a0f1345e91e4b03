package daemon_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"mpsteer/internal/lab/traffic"
	labworld "mpsteer/internal/lab/world"
	"mpsteer/internal/observe"
	"mpsteer/internal/testutil"
)

// watchedUpload is an MPTCP upload over a lab world, watched from the
// client; it runs until stopped.
type watchedUpload struct {
	t      *testing.T
	b      *traffic.Bulk
	s      *observe.Sampler
	cancel context.CancelFunc
	done   chan error
}

func startUpload(t *testing.T, w *labworld.World) *watchedUpload {
	t.Helper()
	return startUploadIn(t, w.Host(labworld.Client).NetNS, w.Host(labworld.Server).NetNS, netip.AddrPortFrom(w.Paths[0].Server.Addr, 5201))
}

// startUploadIn is startUpload between two namespaces, to server.
func startUploadIn(t *testing.T, client, server string, to netip.AddrPort) *watchedUpload {
	t.Helper()
	b := &traffic.Bulk{ClientNS: client, ServerNS: server, Server: to, Proto: traffic.MPTCP, Upload: true, Duration: time.Hour}
	ctx, cancel := context.WithCancel(context.Background())
	u := &watchedUpload{t: t, b: b, s: sampler(t, client), cancel: cancel, done: make(chan error, 1)}
	go func() { _, err := b.Run(ctx); u.done <- err }()
	t.Cleanup(u.stop)
	return u
}

func (u *watchedUpload) subflows(a netip.Addr) []observe.Subflow {
	sfs, err := u.s.Subflows()
	if err != nil {
		u.t.Fatal(err)
	}
	var out []observe.Subflow
	for _, sf := range sfs {
		if sf.Local.Addr() == a {
			out = append(out, sf)
		}
	}
	return out
}

// acked: bytes acknowledged on the subflows from local address a, and
// when the kernel was asked.
func (u *watchedUpload) acked(a netip.Addr) (uint64, time.Time) {
	var n uint64
	sfs := u.subflows(a)
	at := time.Now()
	for _, sf := range sfs {
		n += sf.BytesAcked
	}
	return n, at
}

// carry waits until the subflows from local address a have had n bytes
// acknowledged (at most within), and returns their count and when it was
// read.
func (u *watchedUpload) carry(a netip.Addr, n uint64, within time.Duration) (uint64, time.Time) {
	u.t.Helper()
	var got uint64
	var at time.Time
	start, from := time.Now(), uint64(0)
	from, _ = u.acked(a)
	testutil.Eventually(u.t, within, func() error {
		if got, at = u.acked(a); got < n {
			return fmt.Errorf("the subflow from %v carried %d B since %v, want %d B", a, got-from, time.Since(start).Round(time.Millisecond), n-from)
		}
		return nil
	})
	return got, at
}

// ccs: the congestion controls of the subflows from local address a.
func (u *watchedUpload) ccs(a netip.Addr) []string { return u.ccsExcept(a, nil) }

// ccsExcept is ccs without the subflows of the connections in skip (by
// token).
func (u *watchedUpload) ccsExcept(a netip.Addr, skip map[uint32]bool) []string {
	var out []string
	for _, sf := range u.subflows(a) {
		if !skip[sf.Token] {
			out = append(out, sf.CC)
		}
	}
	return out
}

// received: the bytes the server has read.
func (u *watchedUpload) received() int64 { return u.b.Meter.Bytes() }

// receive waits until the server has read n bytes (at most within).
func (u *watchedUpload) receive(n int64, within time.Duration) {
	u.t.Helper()
	start := time.Now()
	testutil.Eventually(u.t, within, func() error {
		if got := u.received(); got < n {
			return fmt.Errorf("the server read %d B in %v, want %d B", got, time.Since(start).Round(time.Millisecond), n)
		}
		return nil
	})
}

// stop ends the upload (once; the test's cleanup calls it too) and fails
// the test if it had failed before.
func (u *watchedUpload) stop() {
	if u.cancel == nil {
		return
	}
	u.cancel()
	u.cancel = nil
	if err := <-u.done; err != nil && !errors.Is(err, context.Canceled) {
		u.t.Errorf("upload: %v", err)
	}
}
