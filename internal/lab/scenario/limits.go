package scenario

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
