package daemon

import (
	"context"
	"errors"
	"net"
	"strings"

	"mpsteer/internal/pm"
)

// eventSource is where path-manager events come from (a
// *pm.EventListener).
type eventSource interface {
	Receive() ([]pm.Event, error)
}

// maxPendingEvents bounds the events the inbox holds for the loop: a
// flood of events still gets decisions along the way (the loop takes
// them in one round, so a ramp-up of N joins does not cost N rounds).
const maxPendingEvents = 100000

// readEvents reads the path manager's events until the source closes:
// each is counted (metrics, monitor), tracked (the connections' announced
// addresses and closed subflows), and marked for the loop. A read that
// decoded events and failed on others keeps the events it decoded.
func (d *Daemon) readEvents(ctx context.Context, l eventSource) {
	for ctx.Err() == nil {
		evs, err := l.Receive()
		if len(evs) > 0 {
			for _, ev := range evs {
				d.ops.event(ev) // metrics, monitor
				d.tracker.Handle(ev)
			}
			d.in.mark(func(in *inbox) {
				if len(in.events)+len(evs) > maxPendingEvents {
					// The loop is far behind: the oldest go (the next
					// sample shows what they said).
					in.events = in.events[:0]
				}
				in.events = append(in.events, evs...)
			})
		}
		if err != nil {
			if errors.Is(err, net.ErrClosed) || strings.Contains(err.Error(), "closed") {
				return
			}
			d.log.Printf("events: %v", err)
		}
	}
}
