// Package units parses and prints the quantities users write in scenarios,
// configs and on the command line. Every value carries its unit: a bare
// number is an error, because "10" could mean 10 ms or 10 s, 10 bit or 10 MB.
package units

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Rate is a data rate in bits per second.
type Rate float64

// Size is an amount of data in bytes.
type Size int64

// Fraction is a probability in [0, 1], written by users as a percentage.
type Fraction float64

const (
	Kbit Rate = 1e3
	Mbit Rate = 1e6
	Gbit Rate = 1e9
)

// rateUnits maps unit spellings to bits per second. tc's "mbps" means
// megabytes per second while many people mean megabits: it is refused with
// a hint rather than guessed.
var rateUnits = map[string]float64{
	"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9,
	"b/s": 8, "kb/s": 8e3, "mb/s": 8e6, "gb/s": 8e9,
	"kib/s": 8 * 1024, "mib/s": 8 * 1024 * 1024, "gib/s": 8 * 1024 * 1024 * 1024,
}

var sizeUnits = map[string]float64{
	"b": 1, "kb": 1e3, "mb": 1e6, "gb": 1e9,
	"kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30,
}

// splitNumber separates the leading decimal number from its unit.
func splitNumber(s string) (float64, string, error) {
	v, _, unit, err := splitNumberText(s)
	return v, unit, err
}

// splitNumberText is splitNumber that also returns the number as written.
// A number too large for a float64 reads as +Inf (or -Inf), so that callers
// report it as too large rather than as malformed.
func splitNumberText(s string) (float64, string, string, error) {
	s = strings.TrimSpace(s)
	i := 0
	for i < len(s) && (s[i] >= '0' && s[i] <= '9' || s[i] == '.' || s[i] == '-' || s[i] == '+' || s[i] == 'e' && i > 0 && i+1 < len(s) && (s[i+1] >= '0' && s[i+1] <= '9' || s[i+1] == '-')) {
		i++
	}
	if i == 0 {
		return 0, "", "", fmt.Errorf("%q does not start with a number", s)
	}
	v, err := strconv.ParseFloat(s[:i], 64)
	if err != nil && !errors.Is(err, strconv.ErrRange) {
		return 0, "", "", fmt.Errorf("%q: bad number %q", s, s[:i])
	}
	return v, s[:i], strings.TrimSpace(s[i:]), nil
}

// ParseRate reads "400mbit", "4 Mbit", "1MB/s", "512kB/s". Zero is allowed
// (callers decide whether it means "unlimited"); negative rates and rates
// above MaxRate are not.
func ParseRate(s string) (Rate, error) {
	v, unit, err := splitNumber(s)
	if err != nil {
		return 0, err
	}
	if unit == "" {
		return 0, fmt.Errorf("rate %q has no unit (write e.g. 400mbit, 10kbit, 1MB/s)", s)
	}
	u := strings.ToLower(unit)
	if u == "mbps" || u == "kbps" || u == "gbps" || u == "bps" {
		return 0, fmt.Errorf("rate %q is ambiguous: write %smbit for megabits or %sMB/s for megabytes per second", s, trimFloat(v), trimFloat(v))
	}
	mult, ok := rateUnits[u]
	if !ok {
		return 0, fmt.Errorf("rate %q has unknown unit %q (valid: bit, kbit, mbit, gbit, B/s, kB/s, MB/s, GB/s, KiB/s, MiB/s)", s, unit)
	}
	if math.IsNaN(v) {
		return 0, fmt.Errorf("rate %q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("rate %q must not be negative", s)
	}
	if r := v * mult; math.IsInf(r, 0) || r > float64(MaxRate) {
		return 0, fmt.Errorf("rate %q is too large (the largest accepted rate is %s)", s, MaxRate)
	}
	return Rate(v * mult), nil
}

// MaxRate is the largest rate ParseRate accepts: its bits, and so its bytes,
// per second fit in an int64 (rates are handed on as whole bytes per second).
const MaxRate Rate = 9223372036 * Gbit

// MaxSize is the largest size ParseSize accepts (Size counts bytes in an
// int64).
const MaxSize Size = math.MaxInt64

// ParseSize reads "256KiB", "1GB", "1500B". Sizes above MaxSize are refused.
func ParseSize(s string) (Size, error) {
	v, num, unit, err := splitNumberText(s)
	if err != nil {
		return 0, err
	}
	if unit == "" {
		return 0, fmt.Errorf("size %q has no unit (write e.g. 1500B, 256KiB, 1GB)", s)
	}
	mult, ok := sizeUnits[strings.ToLower(unit)]
	if !ok {
		return 0, fmt.Errorf("size %q has unknown unit %q (valid: B, kB, MB, GB, KiB, MiB, GiB)", s, unit)
	}
	if math.IsNaN(v) {
		return 0, fmt.Errorf("size %q is not a number", s)
	}
	if v < 0 {
		return 0, fmt.Errorf("size %q must not be negative", s)
	}
	tooLarge := fmt.Errorf("size %q is too large (the largest accepted size is %dB, 8 EiB less one byte)", s, int64(MaxSize))
	// A whole number of bytes is read exactly, so that every size up to
	// MaxSize is accepted; others go through float64.
	if n, err := strconv.ParseInt(num, 10, 64); err == nil {
		m := int64(mult)
		if n > int64(MaxSize)/m {
			return 0, tooLarge
		}
		return Size(n * m), nil
	}
	b := math.Round(v * mult)
	// float64(math.MaxInt64) is 2^63, one more than MaxSize.
	if math.IsInf(b, 0) || b >= float64(math.MaxInt64) {
		return 0, tooLarge
	}
	return Size(b), nil
}

// ParseDuration reads Go-style durations ("2ms", "1.5s", "200us") and
// refuses bare numbers and negative values.
func ParseDuration(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	if _, err := strconv.ParseFloat(s, 64); err == nil {
		return 0, fmt.Errorf("duration %q has no unit (write e.g. 2ms, 1.5s, 200us)", s)
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return 0, fmt.Errorf("duration %q is not valid (write e.g. 2ms, 1.5s, 200us)", s)
	}
	if d < 0 {
		return 0, fmt.Errorf("duration %q must not be negative", s)
	}
	return d, nil
}

// ParseFraction reads a percentage such as "1%" or "0.5%".
func ParseFraction(s string) (Fraction, error) {
	v, unit, err := splitNumber(s)
	if err != nil {
		return 0, err
	}
	if unit != "%" {
		return 0, fmt.Errorf("%q must be a percentage such as 1%% or 0.5%%", s)
	}
	if v < 0 || v > 100 {
		return 0, fmt.Errorf("%q must be between 0%% and 100%%", s)
	}
	return Fraction(v / 100), nil
}

// BytesPerSecond converts a rate to bytes per second.
func (r Rate) BytesPerSecond() float64 { return float64(r) / 8 }

// Mbit returns the rate in megabits per second.
func (r Rate) Mbit() float64 { return float64(r) / 1e6 }

// TransmitTime is how long a packet of n bytes occupies a link of rate r.
func (r Rate) TransmitTime(n int) time.Duration {
	if r <= 0 {
		return 0
	}
	return time.Duration(float64(n) * 8 * 1e9 / float64(r))
}

func (r Rate) String() string {
	switch {
	case r >= Gbit && math.Mod(float64(r), float64(Gbit)) == 0:
		return trimFloat(float64(r/Gbit)) + "gbit"
	case r >= Mbit:
		return trimFloat(float64(r/Mbit)) + "mbit"
	case r >= Kbit:
		return trimFloat(float64(r/Kbit)) + "kbit"
	default:
		return trimFloat(float64(r)) + "bit"
	}
}

func (s Size) String() string {
	switch {
	case s >= 1<<30 && s%(1<<30) == 0:
		return strconv.FormatInt(int64(s>>30), 10) + "GiB"
	case s >= 1<<20 && s%(1<<20) == 0:
		return strconv.FormatInt(int64(s>>20), 10) + "MiB"
	case s >= 1<<10 && s%(1<<10) == 0:
		return strconv.FormatInt(int64(s>>10), 10) + "KiB"
	case s >= 1e9 && s%1e9 == 0:
		return strconv.FormatInt(int64(s/1e9), 10) + "GB"
	case s >= 1e6 && s%1e6 == 0:
		return strconv.FormatInt(int64(s/1e6), 10) + "MB"
	default:
		return strconv.FormatInt(int64(s), 10) + "B"
	}
}

func (f Fraction) String() string { return trimFloat(float64(f)*100) + "%" }

func trimFloat(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
