// Package format shows the lab's figures to a reader, as the documents
// and the reproduce page quote them: each metric in its unit (which its
// name carries), a median with its 95% interval and n, a paired ratio as a
// change or a share, a verdict with the n it rests on.
package format

import (
	"fmt"
	"strings"

	"mpsteer/internal/stats"
)

// Unit is how a metric is shown: its unit, the factor from the stored
// value to the shown one, and the decimals.
type Unit struct {
	Name   string // "Mbit/s", "ms", "%", … ("" for a plain count)
	Scale  float64
	Digits int
}

// UnitOf gives a metric's unit by its name, which carries it (the lab
// names every value with its unit: goodput_mbit, longest_stall_ms,
// wifi_share_from_200ms_after_up_mean, …). Shares (0–1) are shown in %,
// and so is retx_on_PATH (scripts/ramptcp-metrics.py: the bytes
// retransmitted on a path per byte of new data it carried).
func UnitOf(metric string) Unit {
	m := metric
	for _, suf := range []string{"_median", "_mean", "_min", "_max", "_p50", "_p90", "_p99"} {
		m = strings.TrimSuffix(m, suf)
	}
	switch {
	case strings.HasPrefix(metric, "share:") || strings.HasSuffix(m, "_share") || strings.Contains(m, "_share_") || strings.HasPrefix(m, "retx_on_"):
		return Unit{"%", 100, 1}
	case strings.HasPrefix(metric, "bytes:") || m == "bytes" || m == "bytes_retrans":
		return Unit{"MiB", 1.0 / (1 << 20), 1}
	case strings.HasSuffix(m, "_mbit") || strings.HasSuffix(m, "_mbit_s"):
		return Unit{"Mbit/s", 1, 1}
	case strings.HasSuffix(m, "_pct"):
		return Unit{"%", 1, 2}
	case strings.HasSuffix(m, "_ms"):
		return Unit{"ms", 1, 1}
	case strings.HasSuffix(m, "_us"):
		return Unit{"µs", 1, 1}
	case strings.HasSuffix(m, "_ns"):
		return Unit{"ns", 1, 1}
	case strings.HasSuffix(m, "_s"):
		return Unit{"s", 1, 2}
	case m == "retransmits" || strings.HasPrefix(m, "retransmits_"):
		return Unit{"segments", 1, 0}
	case strings.HasPrefix(metric, "counter:"):
		return Unit{"", 1, 0} // a count of events
	}
	return Unit{"", 1, 2}
}

// Num formats a number with digits decimals and a real minus sign (and
// none on a value that rounds to zero).
func Num(v float64, digits int) string {
	s := fmt.Sprintf("%.*f", digits, v)
	if rest, neg := strings.CutPrefix(s, "-"); neg {
		if strings.Trim(rest, "0.") == "" {
			return rest
		}
		return "−" + rest
	}
	return s
}

// Signed formats a change with its sign (+1.2, −0.5, 0.0).
func Signed(v float64, digits int) string {
	s := Num(v, digits)
	if !strings.HasPrefix(s, "−") && strings.Trim(s, "0.") != "" {
		s = "+" + s
	}
	return s
}

// Suffix is what follows a number in this unit: " Mbit/s", "%", "×", "".
func (u Unit) Suffix() string {
	switch u.Name {
	case "", "%", "×":
		return u.Name
	}
	return " " + u.Name
}

// withUnit joins a number and its unit ("51.9 Mbit/s", "12.5%", "1.37×").
func withUnit(num string, u Unit) string { return num + u.Suffix() }

// Value shows one value in a unit: "51.9 Mbit/s".
func Value(v float64, u Unit) string { return withUnit(Num(v*u.Scale, u.Digits), u) }

// Estimate shows a median with its interval and n:
// "51.9 Mbit/s (95% CI 50.8–53.1, n = 5)"; one value: "51.9 Mbit/s (n = 1)";
// none: "no runs".
func Estimate(s stats.Estimate, u Unit) string {
	switch {
	case s.N == 0:
		return "no runs"
	case s.N == 1:
		return Value(s.Median, u) + " (n = 1)"
	}
	lo, hi := Num(s.Low*u.Scale, u.Digits), Num(s.High*u.Scale, u.Digits)
	return fmt.Sprintf("%s (95%% CI %s, n = %d)", Value(s.Median, u), rangeText(lo, hi, u), s.N)
}

// rangeText writes an interval: "50.8–53.1" ("50.8–53.1%" for percent,
// and "−0.5 to +3.0" where a minus sign would sit next to the dash).
func rangeText(lo, hi string, u Unit) string {
	sep := "–"
	if strings.HasPrefix(lo, "−") || strings.HasPrefix(hi, "−") || strings.HasPrefix(lo, "+") {
		sep = " to "
	}
	if u.Name == "%" {
		return lo + sep + hi + "%"
	}
	return lo + sep + hi
}

// Ratio shows a paired ratio: as "change", its median less 1 in %
// with a sign ("+1.2% (95% CI −0.5 to +3.0%, n = 5)"); as "ratio", the
// median in % of the baseline ("96.0% (95% CI 94.1–98.2%, n = 5)").
func Ratio(s stats.Estimate, as string) string {
	if s.N == 0 {
		return "no paired runs"
	}
	f := func(v float64) string {
		if as == "change" {
			return Signed(100*(v-1), 1)
		}
		return Num(100*v, 1)
	}
	if s.N == 1 {
		return f(s.Median) + "% (n = 1)"
	}
	lo, hi := f(s.Low), f(s.High)
	return fmt.Sprintf("%s%% (95%% CI %s, n = %d)", f(s.Median), rangeText(lo, hi, Unit{Name: "%"}), s.N)
}

// Verdict shows a verdict with the n it rests on, which for one
// value is no interval at all: "met (n = 5)", "met (n = 1: no interval)".
func Verdict(s stats.Estimate, verdict string) string {
	switch {
	case s.N == 0:
		return verdict
	case s.N == 1:
		return verdict + " (n = 1: no interval)"
	}
	return fmt.Sprintf("%s (n = %d)", verdict, s.N)
}
