package linkemu

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"
)

// TraceOpportunityBytes is what one line of a mahimahi trace lets through.
const TraceOpportunityBytes = 1500

// Trace is a mahimahi packet-delivery trace: each line is a time in
// milliseconds at which one 1500-byte delivery opportunity occurs. The trace
// repeats with a period equal to its last timestamp.
type Trace struct {
	Name   string
	Times  []time.Duration // sorted opportunity offsets within one period
	Period time.Duration
}

// MaxTraceBytes bounds a trace file (a day of full-rate opportunities at
// one per millisecond is about 600 MB; traces are minutes).
const MaxTraceBytes = 64 << 20

// ReadTrace loads a trace file. Errors name the file and line.
func ReadTrace(path string) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("trace file: %w", err)
	}
	defer f.Close()
	// A trace is a regular file of bounded size: not a device or a pipe
	// a scenario could name to hang the parser (/dev/zero, /dev/stdin).
	if fi, err := f.Stat(); err != nil {
		return nil, fmt.Errorf("trace file: %w", err)
	} else if !fi.Mode().IsRegular() {
		return nil, fmt.Errorf("trace file %s is not a regular file", path)
	} else if fi.Size() > MaxTraceBytes {
		return nil, fmt.Errorf("trace file %s is %d bytes; at most %d are read", path, fi.Size(), int64(MaxTraceBytes))
	}
	tr := &Trace{Name: filepath.Base(path)}
	sc := bufio.NewScanner(f)
	line := 0
	var last int64 = -1
	for sc.Scan() {
		line++
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		ms, err := strconv.ParseInt(s, 10, 64)
		if err != nil || ms < 0 {
			return nil, fmt.Errorf("%s:%d: %q is not a whole number of milliseconds", path, line, s)
		}
		if ms < last {
			return nil, fmt.Errorf("%s:%d: %d ms comes before the previous line's %d ms; timestamps must not decrease", path, line, ms, last)
		}
		last = ms
		tr.Times = append(tr.Times, time.Duration(ms)*time.Millisecond)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(tr.Times) == 0 || last <= 0 {
		return nil, fmt.Errorf("%s: a trace needs at least one opportunity after 0 ms", path)
	}
	tr.Period = time.Duration(last) * time.Millisecond
	return tr, nil
}

// at is the time of opportunity idx, counting across repetitions.
func (t *Trace) at(idx int64) time.Duration {
	n := int64(len(t.Times))
	return time.Duration(idx/n)*t.Period + t.Times[idx%n]
}

// firstAtOrAfter is the index of the first opportunity at or after rel.
func (t *Trace) firstAtOrAfter(rel time.Duration) int64 {
	if rel < 0 {
		rel = 0
	}
	n := int64(len(t.Times))
	rep := int64(rel / t.Period)
	off := rel - time.Duration(rep)*t.Period
	i := sort.Search(len(t.Times), func(i int) bool { return t.Times[i] >= off })
	return rep*n + int64(i)
}

// MeanRate is the trace's average capacity in bits per second.
func (t *Trace) MeanRate() float64 {
	return float64(len(t.Times)) * TraceOpportunityBytes * 8 / t.Period.Seconds()
}
