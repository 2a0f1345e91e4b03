package testutil

import (
	"context"
	"io"
	"net"
	"net/http"
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
