package scenario

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"mpsteer/internal/lab/linkemu"
	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// Patch is a partial change of link parameters: what a path definition,
// an event or `lab set` says. Nil fields are left alone.
type Patch struct {
	Rate         *units.Rate
	Trace        *linkemu.Trace
	ClearTrace   bool
	Delay        *time.Duration
	Jitter       *time.Duration
	Loss         *units.Fraction
	QueueBytes   *units.Size
	QueuePackets *int
	Outages      []linkemu.Outage
	SetOutages   bool
}

// Keys that a link accepts.
var PatchKeys = []string{"rate", "trace", "delay", "jitter", "loss", "queue", "outage"}

// ParsePatch reads the link keys present in m (others are left for the
// caller). Trace files are resolved relative to dir.
func ParsePatch(m *yamlcfg.Map, dir string) Patch {
	var p Patch
	if m.Has("rate") {
		r := m.Rate("rate", 0)
		if r == 0 && !m.Failed("rate") {
			m.Errorf("rate", "must be above 0bit (leave rate out for an unlimited link)")
		}
		p.Rate = &r
		p.ClearTrace = true
	}
	if m.Has("trace") {
		f := m.String("trace", "")
		switch {
		case m.Failed("trace"):
		case f == "":
			m.Errorf("trace", "a trace needs the name of a trace file")
		default:
			if !filepath.IsAbs(f) {
				f = filepath.Join(dir, f)
			}
			tr, err := linkemu.ReadTrace(f)
			if err != nil {
				if os.IsNotExist(unwrapPath(err)) {
					m.Errorf("trace", "trace file %s does not exist", f)
				} else {
					m.Errorf("trace", "%v", err)
				}
			} else {
				p.Trace = tr
			}
		}
		if p.Rate != nil {
			m.Errorf("trace", "give either rate or trace, not both")
		}
	}
	if m.Has("delay") {
		d := m.DurationIn("delay", 0, 0, MaxDelay)
		p.Delay = &d
	}
	if m.Has("jitter") {
		d := m.DurationIn("jitter", 0, 0, MaxDelay)
		p.Jitter = &d
	}
	if m.Has("loss") {
		f := m.Fraction("loss", 0)
		p.Loss = &f
	}
	if m.Has("queue") {
		s := m.String("queue", "")
		if m.Failed("queue") {
			// Reported already.
		} else if n, ok := parsePackets(s); ok {
			if n <= 0 || n > MaxQueuePackets {
				m.Errorf("queue", "%s is out of range (valid: 1pkt to %dpkt, or %s to %s)", s, MaxQueuePackets, units.Size(1500), MaxQueueBytes)
			}
			p.QueuePackets = &n
			zero := units.Size(0)
			p.QueueBytes = &zero
		} else {
			b, err := units.ParseSize(s)
			if err != nil {
				m.Errorf("queue", "%q is not a queue size (write bytes such as 64KiB or packets such as 100pkt)", s)
			} else if b < 1500 {
				m.Errorf("queue", "%s cannot hold one full-size packet (1500B)", b)
			} else if b > MaxQueueBytes {
				m.Errorf("queue", "%s is out of range (valid: %s to %s, or 1pkt to %dpkt)", s, units.Size(1500), MaxQueueBytes, MaxQueuePackets)
			}
			p.QueueBytes = &b
		}
	}
	if m.Has("outage") {
		p.SetOutages = true
		items := m.List("outage")
		if len(items) > MaxOutages {
			m.Errorf("outage", "%d outage schedules given; at most %d per link are supported", len(items), MaxOutages)
		}
		for _, it := range items {
			if it.Map == nil {
				m.ErrorAt(it.Node, it.Path, "an outage is a mapping such as {at: 5s, for: 5s, every: 10s}")
				continue
			}
			o := linkemu.Outage{
				At:    it.Map.DurationIn("at", 0, 0, MaxRunTime),
				For:   it.Map.DurationIn("for", 0, 0, MaxRunTime),
				Every: it.Map.DurationIn("every", 0, 0, MaxRunTime),
				// Each outage lasts for and a part of jitter drawn per round
				// (the world gives the draw its seed).
				Jitter: it.Map.DurationIn("jitter", 0, 0, MaxRunTime),
			}
			if o.For <= 0 && !it.Map.Failed("for") {
				it.Map.Errorf("for", "an outage needs a length above 0s")
			}
			if o.Every > 0 && o.Every <= o.For+o.Jitter {
				it.Map.Errorf("every", "%v is not longer than the outage itself (%v, and up to %v of jitter)", o.Every, o.For, o.Jitter)
			}
			it.Map.Done()
			p.Outages = append(p.Outages, o)
		}
	}
	return p
}

func unwrapPath(err error) error {
	for {
		u, ok := err.(interface{ Unwrap() error })
		if !ok {
			return err
		}
		err = u.Unwrap()
	}
}

func parsePackets(s string) (int, bool) {
	for _, suf := range []string{"packets", "packet", "pkts", "pkt", "p"} {
		if strings.HasSuffix(s, suf) {
			n, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(s, suf)))
			if err != nil {
				return 0, false
			}
			return n, true
		}
	}
	return 0, false
}

// Apply returns p changed by the patch.
func (pt Patch) Apply(p linkemu.Params) linkemu.Params {
	if pt.Rate != nil {
		p.Rate = *pt.Rate
	}
	if pt.ClearTrace {
		p.Trace = nil
	}
	if pt.Trace != nil {
		p.Trace = pt.Trace
		p.Rate = 0
	}
	if pt.Delay != nil {
		p.Delay = *pt.Delay
	}
	if pt.Jitter != nil {
		p.Jitter = *pt.Jitter
	}
	if pt.Loss != nil {
		p.Loss = *pt.Loss
	}
	if pt.QueueBytes != nil {
		p.QueueBytes = *pt.QueueBytes
	}
	if pt.QueuePackets != nil {
		p.QueuePackets = *pt.QueuePackets
	}
	if pt.SetOutages {
		p.Outages = pt.Outages
	}
	return p
}

// Empty reports whether the patch changes nothing.
func (pt Patch) Empty() bool {
	return pt.Rate == nil && pt.Trace == nil && pt.Delay == nil && pt.Jitter == nil &&
		pt.Loss == nil && pt.QueueBytes == nil && pt.QueuePackets == nil && !pt.SetOutages
}
