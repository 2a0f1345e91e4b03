package daemon

import (
	"context"
	"log"

	"github.com/vishvananda/netlink"
)

// watchInterfaces marks the inbox when an interface or an address of this
// network namespace changed (rtnetlink: link state and carrier, addresses
// added and removed): the policies decide again at once, not at the next
// sample (a path that is back is probed right away). Bursts are merged by
// the inbox. When the subscription cannot be made, the policies see the
// change at the next sample.
func watchInterfaces(ctx context.Context, logger *log.Logger, in *inbox) {
	addrs := make(chan netlink.AddrUpdate, 64)
	links := make(chan netlink.LinkUpdate, 64)
	done := make(chan struct{})
	defer close(done)
	if err := netlink.AddrSubscribe(addrs, done); err != nil {
		logger.Printf("address events: %v (changes show at the next sample)", err)
		addrs = nil
	}
	if err := netlink.LinkSubscribe(links, done); err != nil {
		logger.Printf("link events: %v (changes show at the next sample)", err)
		links = nil
	}
	changed := func() { in.mark(func(in *inbox) { in.iface = true }) }
	for {
		select {
		case <-ctx.Done():
			return
		case _, ok := <-addrs:
			if !ok {
				addrs = nil
				continue
			}
			changed()
		case _, ok := <-links:
			if !ok {
				links = nil
				continue
			}
			changed()
		}
	}
}
