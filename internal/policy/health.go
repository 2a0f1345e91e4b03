package policy

import (
	"time"

	"mpsteer/internal/observe"
)

// PathHealth is the last report the peer sent about one path of a
// connection (RAMPTCP's receiver-assisted path health): the peer, as the
// data's receiver, tells what it sees of the path, over every subflow's
// ACKs, so news of a dying path arrives over a good one. Both ends name a
// path by the MPTCP address ids of its subflow's endpoints.
type PathHealth struct {
	// LocalID and RemoteID are the path's address ids as this host sees
	// them (a subflow's observe.Subflow.LocalID and RemoteID).
	LocalID, RemoteID uint8
	// Received is when the last report about the path arrived; Reports
	// counts them.
	Received time.Time
	Reports  uint32
	// Loss is the share of loss indications (sequence holes opened,
	// duplicate segments) per data segment the receiver got on the path
	// over its recent window; LossKnown is false when too little data
	// arrived there (an idle path).
	Loss      float64
	LossKnown bool
	// LastHop is the health of the receiver's last hop on the path (1 -
	// the loss it sees there), from its radio or the lab's emulator;
	// LastHopKnown is false when the receiver has no such source or it
	// saw nothing.
	LastHop      float64
	LastHopKnown bool
	// ViaLocalID and ViaRemoteID name the subflow the report came on.
	ViaLocalID, ViaRemoteID uint8
}

// HealthOf returns the peer's last report on a subflow's path.
func (c *Conn) HealthOf(sf observe.Subflow) (PathHealth, bool) {
	for _, h := range c.Health {
		if h.LocalID == sf.LocalID && h.RemoteID == sf.RemoteID {
			return h, true
		}
	}
	return PathHealth{}, false
}
