package testutil

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"mpsteer/internal/netnsutil"
)

// HTTPGetIn fetches url from inside the named network namespace (a
// daemon's metrics on its loopback): every connection is opened there.
func HTTPGetIn(ns, url string) (string, error) {
	dial := func(ctx context.Context, network, addr string) (net.Conn, error) {
		var c net.Conn
		err := netnsutil.Do(ns, func() error {
			var err error
			var d net.Dialer
			c, err = d.DialContext(ctx, network, addr)
			return err
		})
		return c, err
	}
	hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: dial, DisableKeepAlives: true}}
	resp, err := hc.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

var netnsSeq atomic.Uint32

// Netns creates a network namespace of the test's own (loopback up),
// named from prefix, the process and a counter, so that tests running at
// the same time never share one; it is removed when the test ends.
func Netns(t testing.TB, prefix string) string {
	t.Helper()
	ns := fmt.Sprintf("%s%d-%d", prefix, os.Getpid(), netnsSeq.Add(1))
	if err := netnsutil.Create(ns); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(ns) })
	return ns
}

// ServeIn listens on addr inside the named network namespace (MPTCP
// when mptcp) and hands every connection it accepts to serve in a
// goroutine of its own (nil: close it at once). The listener closes when
// the test ends.
func ServeIn(t testing.TB, ns, addr string, mptcp bool, serve func(net.Conn)) net.Listener {
	t.Helper()
	var ln net.Listener
	if err := netnsutil.Do(ns, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(mptcp)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", addr)
		return err
	}); err != nil {
		t.Fatalf("listen on %s in %s: %v", addr, ns, err)
	}
	t.Cleanup(func() { ln.Close() })
	if serve == nil {
		serve = func(c net.Conn) { c.Close() }
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serve(c)
		}
	}()
	return ln
}

// Discard reads a connection to its end and closes it (a sink for
// ServeIn).
func Discard(c net.Conn) {
	io.Copy(io.Discard, c)
	c.Close()
}
