package daemon

import (
	"context"
	"log"

	"github.com/vishvananda/netlink"
)

// subscribeInterfaces reports, on the returned channel, that an interface
// or an address of this network namespace changed (rtnetlink: link state
// and carrier, addresses added and removed). Bursts are merged: one
// pending report is enough for a new round. When the subscription cannot
// be made the channel never reports, and the policies see the change at
// the next sample.
func subscribeInterfaces(ctx context.Context, logger *log.Logger) <-chan struct{} {
	out := make(chan struct{}, 1)
	addrs := make(chan netlink.AddrUpdate, 64)
	links := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		logger.Printf("address events: %v (changes show at the next sample)", err)
		addrs = nil
	}
	if err := netlink.LinkSubscribe(links, done); err != nil {
		logger.Printf("link events: %v (changes show at the next sample)", err)
		links = nil
	}
	notify := func() {
		select {
		case out <- struct{}{}:
		default:
		}
	}
	go func() {
		defer close(done)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-addrs:
				if !ok {
					addrs = nil
					continue
				}
				notify()
			case _, ok := <-links:
				if !ok {
					links = nil
					continue
				}
				notify()
			}
		}
	}()
	return out
}
