package sockops

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/bpfutil"
)

// Flags of the health program's config (health.bpf.c).
const (
	healthReport = 1
	healthParse  = 2
	healthPorts  = 4
)

// HealthConfig says what the health program does in its namespace.
type HealthConfig struct {
	// Report: this host reports the health of its paths to its peers (the
	// data receiver): it counts the loss indications on each subflow and
	// writes the option on its pure ACKs.
	Report bool
	// Parse: this host reads its peers' reports (the data sender).
	Parse bool
	// Ports selects the connections to report on (a local or remote port
	// among these); none: every MPTCP connection of the namespace.
	Ports []uint16
	// Window is the span the loss indications are counted over (the
	// current half and the one before); default 100ms.
	Window time.Duration
	// MinSegments: with fewer data segments in the window a path's loss is
	// reported as not known; default 4.
	MinSegments uint32
	// NotSentLowat (sender): TCP_NOTSENT_LOWAT set on subflows when they
	// are established (0: left alone). MPTCP hands a subflow data while
	// its own queue of unsent data is below it, so a path set inactive
	// has little queued that it must still carry.
	NotSentLowat uint32
	// NotSentLowatExcept: congestion controls (as named in
	// net.ipv4.tcp_congestion_control) whose subflows keep the kernel's
	// unbounded queue; at most MaxLowatExcept names.
	NotSentLowatExcept []string
}

// PathKey names a path of a connection from the host holding the map:
// its local MPTCP token and the subflow's local and remote address ids.
type PathKey struct {
	Token             uint32
	LocalID, RemoteID uint8
}

// Report is the last report a peer sent about one path.
type Report struct {
	// At is when it arrived.
	At time.Time
	// Count is how many reports about the path arrived.
	Count uint32
	// Loss and LastHop are the option's bytes (0..200, or Unknown).
	Loss, LastHop uint8
	// ViaLocalID and ViaRemoteID name the subflow it came on.
	ViaLocalID, ViaRemoteID uint8
}

// Unknown is the byte for a value the reporter does not know.
const Unknown = 255

// Scale is the byte for a fraction of 1 (values go 0..Scale in 0.5% steps).
const Scale = 200

// Health is the path-health sockops program (RAMPTCP's reports), attached
// for one network namespace. It arms subflows established after it is
// attached (or after Configure enables a role).
type Health struct {
	mu   sync.Mutex
	objs healthObjects
	link link.Link
	cfg  HealthConfig
	hops map[PathKey]uint8
}

// NewHealth loads and attaches the program for the network namespace with
// the given cookie (0 = every namespace). It does nothing until Configure.
func NewHealth(netnsCookie uint64) (*Health, error) {
	spec, err := loadHealth()
	if err != nil {
		return nil, err
	}
	h := &Health{hops: map[PathKey]uint8{}}
	if err := bpfutil.LoadInNetns(spec, netnsCookie, &h.objs); err != nil {
		return nil, fmt.Errorf("load the sockops health program: %w", bpfutil.VerifierDetail(err))
	}
	if h.link, err = bpfutil.AttachSockOps(h.objs.MpsteerHealth, "health"); err != nil {
		h.objs.Close()
		return nil, err
	}
	return h, nil
}

// Configure sets what the program does; it takes effect on the next
// packet (roles apply to subflows established from then on).
func (h *Health) Configure(c HealthConfig) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if c.Window <= 0 {
		c.Window = 100 * time.Millisecond
	}
	if c.MinSegments == 0 {
		c.MinSegments = 4
	}
	var v healthHlConf
	if c.Report {
		v.Flags |= healthReport
	}
	if c.Parse {
		v.Flags |= healthParse
	}
	if len(c.Ports) > 0 {
		v.Flags |= healthPorts
	}
	v.MinSegs = c.MinSegments
	v.NotsentLowat = c.NotSentLowat
	if err := ccNames(&v.LowatExcept, c.NotSentLowatExcept); err != nil {
		return err
	}
	v.BucketNs = uint64(c.Window / 2)
	// Ports first, so that the filter is in place when the flag is.
	old := map[uint16]bool{}
	for _, p := range h.cfg.Ports {
		old[p] = true
	}
	var errs error
	for _, p := range c.Ports {
		delete(old, p)
		if err := h.objs.HlPorts.Put(p, uint8(1)); err != nil {
			errs = errors.Join(errs, err)
		}
	}
	for p := range old {
		_ = h.objs.HlPorts.Delete(p)
	}
	if err := h.objs.HlConfig.Put(uint32(0), &v); err != nil {
		errs = errors.Join(errs, err)
	}
	h.cfg = c
	return errs
}

// Config returns what Configure last set.
func (h *Health) Config() HealthConfig {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.cfg
}

func pathKey(k PathKey) healthHlPathKey {
	return healthHlPathKey{Token: k.Token, LocalId: k.LocalID, RemoteId: k.RemoteID}
}

// SetLastHop makes the last-hop health the reports carry equal to want
// (per path of this host's connections, 0..Scale).
func (h *Health) SetLastHop(want map[PathKey]uint8) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	return syncMap(h.objs.HlLasthop, h.hops, want, pathKey, func(v uint8) uint8 { return v })
}

// monoNow is the clock bpf_ktime_get_ns() reads.
func monoNow() time.Duration {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Reports returns what the peers reported, per path.
func (h *Health) Reports() (map[PathKey]Report, error) {
	out := map[PathKey]Report{}
	now, mono := time.Now(), monoNow()
	var k healthHlPathKey
	var v healthHlRx
	it := h.objs.HlReports.Iterate()
	for it.Next(&k, &v) {
		age := mono - time.Duration(v.At)
		out[PathKey{Token: k.Token, LocalID: k.LocalId, RemoteID: k.RemoteId}] = Report{At: now.Add(-age), Count: v.Count,
			Loss: v.Loss, LastHop: v.Lasthop, ViaLocalID: v.ViaLocal, ViaRemoteID: v.ViaRemote}
	}
	return out, it.Err()
}

// Forget drops what the program keeps about connections that are gone
// (live reports whether a token is still in use).
func (h *Health) Forget(live func(token uint32) bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var tok uint32
	var conn healthHlConn
	var gone []uint32
	it := h.objs.HlConns.Iterate()
	for it.Next(&tok, &conn) {
		if !live(tok) {
			gone = append(gone, tok)
		}
	}
	for _, t := range gone {
		_ = h.objs.HlConns.Delete(t)
	}
	var k healthHlPathKey
	var rx healthHlRx
	var stale []healthHlPathKey
	rit := h.objs.HlReports.Iterate()
	for rit.Next(&k, &rx) {
		if !live(k.Token) {
			stale = append(stale, k)
		}
	}
	for _, k := range stale {
		_ = h.objs.HlReports.Delete(&k)
	}
	for pk := range h.hops {
		if !live(pk.Token) {
			k := pathKey(pk)
			_ = h.objs.HlLasthop.Delete(&k)
			delete(h.hops, pk)
		}
	}
}

// HealthStatNames are the program's counters, in its order.
var HealthStatNames = []string{"subflows", "acks", "written", "partial", "no_room", "no_info", "store_failed",
	"segments", "holes", "duplicates", "no_slot", "parsed", "entries", "bad_entries", "malformed", "lowat_failed",
	"lowat_set", "lowat_excepted"}

// Stats sums the program's per-CPU counters.
func (h *Health) Stats() map[string]uint64 {
	out := map[string]uint64{}
	for i, name := range HealthStatNames {
		var per []uint64
		if err := h.objs.HlStats.Lookup(uint32(i), &per); err != nil {
			continue
		}
		var n uint64
		for _, v := range per {
			n += v
		}
		out[name] = n
	}
	return out
}

// Close stops the program: armed subflows keep their callback flags but
// nothing answers them, so they send no more reports.
func (h *Health) Close() error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.objs.HlConfig.Put(uint32(0), &healthHlConf{})
	return errors.Join(h.link.Close(), h.objs.Close())
}
