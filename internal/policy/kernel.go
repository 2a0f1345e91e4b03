package policy

import "time"

// KernelUses is what a policy, as its entry configures it, asks of the
// kernel beyond the path manager's netlink family and the sampling every
// policy needs. It is known from the entry alone (no host), so that the
// daemon can refuse a config the running kernel cannot run before it
// changes anything (internal/daemon's kernel check, internal/kernelfeat).
type KernelUses struct {
	// OpensSubflows: it opens and closes subflows or announces addresses
	// (the userspace path manager's commands).
	OpensSubflows bool
	// RTOMax caps the retransmission timeout of its subflows
	// (TCP_RTO_MAX_MS, from a sockops program); RTOMaxGiven: the entry
	// sets it (prefer's is on by default).
	RTOMax      time.Duration
	RTOMaxGiven bool
	// RateCaps: it caps subflows' rates (the config's rate_via says how).
	RateCaps bool
	// HealthReports: it reads the peer's path-health reports (a sockops
	// program that parses a TCP option).
	HealthReports bool
	// TCXOnly: it attaches a program through TCX, with no fallback
	// (spread).
	TCXOnly bool
	// Coupled: it runs a coupled congestion control.
	Coupled bool
}

// KernelUser is implemented by the policies that use any of KernelUses.
type KernelUser interface {
	KernelUses() KernelUses
}

// UsesOf is what p uses of the kernel (nothing special for a policy that
// is no KernelUser).
func UsesOf(p Policy) KernelUses {
	if k, ok := p.(KernelUser); ok {
		return k.KernelUses()
	}
	return KernelUses{}
}

// KernelUses of a scoped policy are its inner policy's.
func (s *Scoped) KernelUses() KernelUses { return UsesOf(s.Inner) }

// KernelUses: prefer opens subflows where the daemon is the path manager,
// and caps its subflows' RTO.
func (p *Prefer) KernelUses() KernelUses {
	return KernelUses{OpensSubflows: p.mesh != nil, RTOMax: p.RTOMax, RTOMaxGiven: p.rtoMaxGiven}
}

// KernelUses: fullmesh opens subflows and announces addresses.
func (f *Fullmesh) KernelUses() KernelUses { return KernelUses{OpensSubflows: true} }

// KernelUses: incremental opens subflows.
func (p *Incremental) KernelUses() KernelUses { return KernelUses{OpensSubflows: true} }

// KernelUses: limit caps rates.
func (p *StaticLimit) KernelUses() KernelUses { return KernelUses{RateCaps: true} }

// KernelUses: dynthresh caps rates in its shaped mode, with in_time_caps or
// startup_guard.
func (d *DynThresh) KernelUses() KernelUses {
	return KernelUses{RateCaps: d.Mode == dtShaped && (d.sh.InTimeCaps || d.sh.StartupGuard)}
}

// KernelUses: ecf caps rates with in_time_caps or startup_guard.
func (p *ECF) KernelUses() KernelUses {
	return KernelUses{RateCaps: p.sh.InTimeCaps || p.sh.StartupGuard}
}

// KernelUses: ramptcp reads the peer's reports, unless it watches its own
// sending alone.
func (r *RAMPTCP) KernelUses() KernelUses { return KernelUses{HealthReports: r.Signal == rampReports} }

// KernelUses: coupled runs a coupled congestion control.
func (p *Coupled) KernelUses() KernelUses { return KernelUses{Coupled: true} }

// KernelUses: spread's program attaches through TCX.
func (p *Spread) KernelUses() KernelUses { return KernelUses{TCXOnly: true} }
