package scenario

import (
	"strconv"
	"time"

	"gopkg.in/yaml.v3"

	"mpsteer/internal/units"
	"mpsteer/internal/yamlcfg"
)

// TrafficKind names a traffic generator.
type TrafficKind string

const (
	Bulk     TrafficKind = "bulk"
	Flows    TrafficKind = "flows"
	UDPFlood TrafficKind = "udp-flood"
)

// Traffic is one generator.
type Traffic struct {
	Kind  TrafficKind
	Start time.Duration
	// Bulk: stops at Duration or after Size bytes, whichever comes first.
	Duration time.Duration
	Size     units.Size
	// Upload (client → server) or not.
	Upload bool
	// Bulk: concurrent connections (1 to MaxStreams).
	Streams int
	// AppRates: a bulk sender that sends at most these rates (all its
	// streams together), each from its At (from the transfer's start) to
	// the next; none: as fast as the connection takes.
	AppRates []RateStep
	// Reader: how the receiving application reads a bulk transfer,
	// ReaderPoll or ReaderBlocking.
	Reader string
	// Competitor: single-path TCP over Path beside the measured traffic,
	// measured apart (competitor.go).
	Competitor bool
	// Flows: sizes drawn with weights, Count flows started every Interval.
	Sizes    []units.Size
	Weights  []float64
	Count    int
	Interval time.Duration
	// UDP flood: on Path, from Start to Stop, at Rate. Competitor: the
	// path it crosses.
	Path string
	// Pair is the client and server VM of a tenants world (default: the
	// first measured pair); AllPairs: none was given, so the traffic runs
	// between every measured pair (Pairs).
	Pair     [2]string
	AllPairs bool
	Stop     time.Duration
	Rate     units.Rate
	Line     int
}

// How a bulk transfer's receiving application reads (the traffic key
// reader): through Go's poller (epoll, then read; most servers read so),
// or asleep in recv(2), a thread per connection.
const (
	ReaderPoll     = "poll"
	ReaderBlocking = "blocking"
)

// RateStep is an application's sending rate from At on.
type RateStep struct {
	At   time.Duration
	Rate units.Rate
}

// MaxRateSteps bounds a bulk sender's rate schedule.
const MaxRateSteps = 64

// parseAppRates reads a bulk sender's rate: one rate (rate: 30mbit), or a
// schedule (rate: [{at: 0s, rate: 30mbit}, {at: 10s, rate: 60mbit}]).
func parseAppRates(t *yamlcfg.Map, duration time.Duration) []RateStep {
	n := yamlcfg.RawNode(t, "rate")
	if n == nil {
		return nil
	}
	if n.Kind == yaml.ScalarNode {
		r := t.RateIn("rate", 0, 1, MaxFloodRate)
		if r <= 0 {
			if !t.Failed("rate") {
				t.Errorf("rate", "an application's rate must be above 0bit (leave rate out for a sender as fast as the connection)")
			}
			return nil
		}
		return []RateStep{{0, r}}
	}
	items := t.List("rate")
	if len(items) > MaxRateSteps {
		t.Errorf("rate", "%d steps; at most %d", len(items), MaxRateSteps)
		return nil
	}
	var out []RateStep
	for i, it := range items {
		if it.Map == nil {
			t.ErrorAt(it.Node, it.Path, "a step is a mapping {at: 10s, rate: 60mbit}")
			continue
		}
		st := RateStep{At: it.Map.DurationIn("at", 0, 0, MaxRunTime), Rate: it.Map.RateIn("rate", 0, 1, MaxFloodRate)}
		switch {
		case !it.Map.Has("rate"):
			it.Map.Errorf("", "a step needs a rate, e.g. {at: 10s, rate: 60mbit}")
		case i == 0 && st.At != 0 && !it.Map.Failed("at"):
			it.Map.Errorf("at", "the first step starts the transfer: at: 0s")
		case i > 0 && st.At <= out[len(out)-1].At && !it.Map.Failed("at"):
			it.Map.Errorf("at", "steps go forward in time: %s is not after %s", yamlcfg.FormatDuration(st.At), yamlcfg.FormatDuration(out[len(out)-1].At))
		case duration > 0 && st.At >= duration && !it.Map.Failed("at"):
			it.Map.Errorf("at", "the transfer ends at %s, before this step", yamlcfg.FormatDuration(duration))
		}
		it.Map.Done()
		out = append(out, st)
	}
	if len(out) == 0 && !t.Failed("rate") {
		t.Errorf("rate", "give a rate (rate: 30mbit) or steps (rate: [{at: 0s, rate: 30mbit}, {at: 10s, rate: 60mbit}])")
	}
	return out
}

// End is when the generator stops (0 = unknown, size-bound).
func (t Traffic) End() time.Duration {
	switch t.Kind {
	case Bulk:
		if t.Duration > 0 {
			return t.Start + t.Duration
		}
	case Flows:
		return t.Start + time.Duration(t.Count)*t.Interval
	case UDPFlood:
		return t.Stop
	}
	return 0
}

func parseTraffic(t *yamlcfg.Map, paths map[string]bool, tn *Tenants) Traffic {
	tr := Traffic{Line: t.Line()}
	tr.Pair = parsePair(t, tn)
	tr.AllPairs = tn != nil && !t.Has("pair")
	tr.Kind = TrafficKind(t.Enum("type", "", string(Bulk), string(Flows), string(UDPFlood)))
	if tr.Kind == "" && !t.Has("type") {
		t.Errorf("type", "every traffic entry needs a type (valid: bulk, flows, udp-flood)")
	}
	tr.Start = t.DurationIn("start", 0, 0, MaxRunTime)
	switch tr.Kind {
	case Bulk:
		tr.Duration = t.DurationIn("duration", 0, 0, MaxRunTime)
		tr.Size = t.Size("size", 0)
		if tr.Duration == 0 && tr.Size == 0 && !t.Failed("duration") && !t.Failed("size") {
			t.Errorf("duration", "a bulk transfer needs a duration, a size, or both (it stops at the first reached)")
		}
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
		tr.Streams = t.Int("streams", 1, 1, MaxStreams)
		tr.AppRates = parseAppRates(t, tr.Duration)
		tr.Reader = t.Enum("reader", ReaderPoll, ReaderPoll, ReaderBlocking)
		parseCompetitor(t, &tr, paths, tn)
	case Flows:
		sizes := t.Strings("sizes")
		if len(sizes) > MaxFlowSizes {
			t.Errorf("sizes", "%d sizes given; at most %d are supported", len(sizes), MaxFlowSizes)
		}
		for _, s := range sizes {
			sz, err := units.ParseSize(s)
			if err != nil {
				t.Errorf("sizes", "%v", err)
				continue
			}
			if sz <= 0 {
				t.Errorf("sizes", "flow sizes must be above 0B")
			}
			tr.Sizes = append(tr.Sizes, sz)
		}
		if len(tr.Sizes) == 0 && !t.Failed("sizes") {
			t.Errorf("sizes", "short flows need a list of sizes, e.g. [10KiB, 100KiB, 1MiB]")
		}
		for _, w := range t.Strings("weights") {
			f, err := strconv.ParseFloat(w, 64)
			if err != nil || f < 0 {
				t.Errorf("weights", "%q is not a weight (a number 0 or above)", w)
			}
			tr.Weights = append(tr.Weights, f)
		}
		if len(tr.Weights) > 0 && len(tr.Weights) != len(tr.Sizes) {
			t.Errorf("weights", "%d weights for %d sizes", len(tr.Weights), len(tr.Sizes))
		}
		tr.Count = t.Int("count", 10, 1, MaxFlows)
		tr.Interval = t.DurationIn("interval", 100*time.Millisecond, MinFlowInterval, MaxRunTime)
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
	case UDPFlood:
		tr.Path = t.String("path", "")
		switch {
		case t.Failed("path"):
		case tn != nil:
			if tr.Path != "" {
				t.Errorf("path", "a tenants world has no paths: a flood runs between a VM pair (pair: [vm3, vm4], default the measured pair)")
			}
		case tr.Path == "":
			t.Errorf("path", "a UDP flood needs the path it floods (path: NAME)")
		case !paths[tr.Path]:
			t.Errorf("path", "%q is not a path of this scenario", tr.Path)
		}
		tr.Start = t.DurationIn("from", tr.Start, 0, MaxRunTime)
		tr.Stop = t.DurationIn("to", 0, 0, MaxRunTime)
		if tr.Stop <= tr.Start && !t.Failed("to") && !t.Failed("from") && !t.Failed("start") {
			t.Errorf("to", "the flood must end (to) after it starts (from)")
		}
		tr.Rate = t.RateIn("rate", 0, 1, MaxFloodRate)
		if tr.Rate == 0 && !t.Failed("rate") {
			t.Errorf("rate", "a UDP flood needs a rate, e.g. 400mbit")
		}
		tr.Upload = t.Enum("direction", "up", "up", "down") == "up"
	}
	// Each time is within MaxRunTime; a generator's end may still lie
	// beyond it (start plus duration, or count × interval).
	endKey := map[TrafficKind]string{Bulk: "duration", Flows: "count", UDPFlood: "to"}[tr.Kind]
	if end := tr.End(); end > MaxRunTime && !t.Failed(endKey) {
		t.Errorf(endKey, "the generator would end at %s, after the longest run (%s)", yamlcfg.FormatDuration(end), yamlcfg.FormatDuration(MaxRunTime))
	}
	if tr.Kind != "" {
		// Without a valid type, which keys are valid is unknown: the type's
		// own error is the one to fix first.
		t.Done()
	}
	return tr
}
