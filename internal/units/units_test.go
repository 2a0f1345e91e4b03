package units

import (
	"strings"
	"testing"
	"time"
)

func TestParseRate(t *testing.T) {
	good := map[string]Rate{
		"400mbit": 400e6, "4 Mbit": 4e6, "1gbit": 1e9, "10kbit": 10e3,
		"1MB/s": 8e6, "512kB/s": 512 * 8e3, "1MiB/s": 8 << 20, "0bit": 0, "2.5mbit": 2.5e6,
	}
	for in, want := range good {
		got, err := ParseRate(in)
		if err != nil || got != want {
			t.Errorf("ParseRate(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	bad := map[string]string{
		"400":      "no unit",
		"-4mbit":   "negative",
		"4mbps":    "ambiguous",
		"4furlong": "unknown unit",
		"fast":     "does not start with a number",
	}
	for in, want := range bad {
		_, err := ParseRate(in)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ParseRate(%q) error = %v; want it to mention %q", in, err, want)
		}
	}
}

func TestParseSize(t *testing.T) {
	good := map[string]Size{"1500B": 1500, "256KiB": 256 << 10, "1GB": 1e9, "2MiB": 2 << 20, "64kB": 64000}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"1500", "-1KiB", "3 parsecs"} {
		if _, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) succeeded; want error", in)
		}
	}
}

func TestParseDuration(t *testing.T) {
	good := map[string]time.Duration{"2ms": 2 * time.Millisecond, "1.5s": 1500 * time.Millisecond, "200us": 200 * time.Microsecond, "0s": 0}
	for in, want := range good {
		got, err := ParseDuration(in)
		if err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"10", "-2ms", "soon"} {
		if _, err := ParseDuration(in); err == nil {
			t.Errorf("ParseDuration(%q) succeeded; want error", in)
		}
	}
}

func TestParseFraction(t *testing.T) {
	got, err := ParseFraction("0.5%")
	if err != nil || got != 0.005 {
		t.Fatalf("ParseFraction(0.5%%) = %v, %v", got, err)
	}
	for _, in := range []string{"0.5", "101%", "-1%"} {
		if _, err := ParseFraction(in); err == nil {
			t.Errorf("ParseFraction(%q) succeeded; want error", in)
		}
	}
}

func TestStringsRoundTrip(t *testing.T) {
	for _, r := range []Rate{400e6, 4e6, 1e9, 10e3, 2.5e6} {
		back, err := ParseRate(r.String())
		if err != nil || back != r {
			t.Errorf("rate %v printed as %q parsed back as %v, %v", float64(r), r.String(), back, err)
		}
	}
	for _, s := range []Size{1500, 256 << 10, 1e9, 3 << 20} {
		back, err := ParseSize(s.String())
		if err != nil || back != s {
			t.Errorf("size %d printed as %q parsed back as %v, %v", int64(s), s.String(), back, err)
		}
	}
	if got := Rate(8e6).TransmitTime(1500); got != 1500*time.Microsecond {
		t.Errorf("TransmitTime(1500B at 8mbit) = %v, want 1.5ms", got)
	}
}

func TestParseSizeRefusesWhatDoesNotFit(t *testing.T) {
	for _, in := range []string{"1e30GB", "1e400B", "9223372036854775808B", "9300000000GB", "8589934592GiB", "9.3e18B"} {
		got, err := ParseSize(in)
		if err == nil || !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "9223372036854775807B") {
			t.Errorf("ParseSize(%q) = %v, %v; want a too-large error naming the largest size", in, got, err)
		}
	}
	// The largest size itself, and large sizes near it, are accepted exactly.
	good := map[string]Size{
		"9223372036854775807B": MaxSize,
		"8589934591GiB":        8589934591 << 30,
		"9e18B":                9e18,
		"1e-400B":              0,
	}
	for in, want := range good {
		got, err := ParseSize(in)
		if err != nil || got != want {
			t.Errorf("ParseSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
}

func TestParseRateRefusesWhatDoesNotFit(t *testing.T) {
	for _, in := range []string{"1e30gbit", "1e400bit", "1e309mbit", "9223372037gbit", "2e18B/s"} {
		got, err := ParseRate(in)
		if err == nil || !strings.Contains(err.Error(), "too large") || !strings.Contains(err.Error(), "9223372036gbit") {
			t.Errorf("ParseRate(%q) = %v, %v; want a too-large error naming the largest rate", in, got, err)
		}
	}
	if got, err := ParseRate("9223372036gbit"); err != nil || got != MaxRate {
		t.Errorf("ParseRate(largest) = %v, %v", got, err)
	}
	if got, err := ParseRate("-1e400bit"); err == nil || !strings.Contains(err.Error(), "negative") {
		t.Errorf("ParseRate(-1e400bit) = %v, %v; want a negative-rate error", got, err)
	}
}

func TestNoNaNOrInfinity(t *testing.T) {
	for _, in := range []string{"NaNB", "nanB", "InfB", "+InfB", "-InfB", "infinityB"} {
		if got, err := ParseSize(in); err == nil {
			t.Errorf("ParseSize(%q) = %v; want error", in, got)
		}
	}
	for _, in := range []string{"NaNbit", "Infbit", "+Infmbit", "infinitybit"} {
		if got, err := ParseRate(in); err == nil {
			t.Errorf("ParseRate(%q) = %v; want error", in, got)
		}
	}
	for _, in := range []string{"NaN%", "Inf%", "1e400%"} {
		if got, err := ParseFraction(in); err == nil {
			t.Errorf("ParseFraction(%q) = %v; want error", in, got)
		}
	}
}
