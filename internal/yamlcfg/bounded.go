package yamlcfg

import (
	"strings"
	"time"

	"mpsteer/internal/units"
)

// DurationIn reads a duration such as 10ms within [min, max]; def when
// absent or not valid.
func (m *Map) DurationIn(key string, def, min, max time.Duration) time.Duration {
	d := m.Duration(key, def)
	if m.Failed(key) || !m.Has(key) {
		return d
	}
	if d < min || d > max {
		s, _ := m.scalar(key)
		m.Errorf(key, "%s is out of range (valid: %s to %s)", s, FormatDuration(min), FormatDuration(max))
		return def
	}
	return d
}

// SizeIn reads a size such as 256KiB within [min, max].
func (m *Map) SizeIn(key string, def, min, max units.Size) units.Size {
	v := m.Size(key, def)
	if m.Failed(key) || !m.Has(key) {
		return v
	}
	if v < min || v > max {
		s, _ := m.scalar(key)
		m.Errorf(key, "%s is out of range (valid: %s to %s)", s, min, max)
		return def
	}
	return v
}

// RateIn reads a rate such as 400mbit within [min, max].
func (m *Map) RateIn(key string, def, min, max units.Rate) units.Rate {
	r := m.Rate(key, def)
	if m.Failed(key) || !m.Has(key) {
		return r
	}
	if r < min || r > max {
		s, _ := m.scalar(key)
		m.Errorf(key, "%s is out of range (valid: %s to %s)", s, min, max)
		return def
	}
	return r
}

// FormatDuration writes d the way users write durations: 1h, 1h30m, 10s,
// 1ms (time.Duration's String writes 1h0m0s).
func FormatDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
