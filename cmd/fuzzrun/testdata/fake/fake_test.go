// Package fake holds fuzz targets that misbehave the ways fuzzrun must
// catch, for fuzzrun's own test. It sits under testdata, so ./... and
// fuzzrun's search of the tree leave it out.
package fake

import (
	"sync/atomic"
	"testing"
	"time"
)

// FuzzFine is cheap and never stops.
func FuzzFine(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {})
}

var calls atomic.Int64

// FuzzStalls runs 300 inputs in each worker and then never returns, the
// way FuzzParseScenario looked: a few hundred inputs, then 0 a second.
func FuzzStalls(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if calls.Add(1) > 300 {
			time.Sleep(time.Hour)
		}
	})
}

// FuzzSlow makes progress all the time, but each input takes 50 ms: far
// fewer inputs than the minimum in the run.
func FuzzSlow(f *testing.F) {
	f.Add([]byte("a"))
	f.Fuzz(func(t *testing.T, b []byte) { time.Sleep(50 * time.Millisecond) })
}
