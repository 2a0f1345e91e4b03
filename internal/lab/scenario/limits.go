package scenario

import (
	"mpsteer/internal/units"
	"time"
)

// MaxPaths is the most paths a scenario may have.
const MaxPaths = 16

// MaxStreams is the most concurrent connections of one bulk transfer.
const MaxStreams = 64

// MaxCoreLinks is the most parallel links in a core given by links.
const MaxCoreLinks = 16

// MaxLinksPerPair is the most parallel links per address pair in a core
// given by links_per_pair.
const MaxLinksPerPair = 16

// MaxCoreLinksTotal is the most links a core may have in all: each gets a
// /24 of 10.200.0.0/16 (10.200.N.1 at r1, 10.200.N.2 at r2).
const MaxCoreLinksTotal = 256

// Bounds on every other number in a scenario that sizes a loop, an
// allocation or a run, in the scenario package or in what the runner and
// the world build from it (docs/scenarios.md lists them). A value beyond
// one is an error naming the file, line and key and the valid range.
// yamlcfg bounds the document itself (size, values with aliases expanded,
// nesting).
const (
	// MaxRunTime is the latest time any traffic, event or outage may
	// name: a run lasts as long as its traffic, and its samples, files and
	// plots grow with its length.
	MaxRunTime = time.Hour
	// MaxTraffic is the most traffic generators: each has its own port
	// (5201 + its index) and goroutines.
	MaxTraffic = 64
	// MaxFlows is the most short flows one generator starts: each is a
	// connection and a goroutine, and the runner holds a result for every
	// one from the start.
	MaxFlows = 100_000
	// MinFlowInterval is the shortest time between two flows' starts: the
	// generator's ticker needs a positive one, and a shorter one would
	// start thousands of connections at once.
	MinFlowInterval = time.Millisecond
	// MaxFlowSizes is the most sizes one flows generator draws from; every
	// flow's draw walks them.
	MaxFlowSizes = 64
	// MaxFloodRate is the fastest UDP flood: it sends in 1 ms rounds, each
	// catching up with its rate, and one socket cannot send much more.
	MaxFloodRate = 10 * units.Gbit
	// MaxDelay bounds a link's delay and its jitter: the emulator holds
	// every packet in a buffer until it is due, so its memory grows with
	// delay × throughput.
	MaxDelay = 10 * time.Second
	// MaxQueuePackets and MaxQueueBytes bound a link's drop-tail queue: the
	// emulator holds every queued packet in a 2 KiB buffer.
	MaxQueuePackets = 100_000
	MaxQueueBytes   = units.Size(256 << 20)
	// MaxOutages is the most outage schedules of one link direction: every
	// packet is checked against each.
	MaxOutages = 16
	// MaxSocketBuffer bounds rmem and wmem (a host's or a VM's): the
	// kernel holds tcp_rmem and tcp_wmem in an int, and every socket may
	// grow this large.
	MaxSocketBuffer = units.Size(1 << 30)
	// MaxVariants is the most variants: each is a lab run of its own.
	MaxVariants = 32
)
