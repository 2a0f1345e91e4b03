// Package monoclock is the one clock of a lab process: monotonic time since
// the process started, and sleeps precise to tens of microseconds. Go's
// timers can be a millisecond late, too coarse for 1 ms links and probes.
package monoclock

import (
	"runtime"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"
)

var epoch = time.Now()

// Now is the time since the process started.
func Now() time.Duration { return time.Since(epoch) }

// PreciseThread lowers the calling thread's timer slack to 1 ns. Call it
// from a goroutine locked to its OS thread (runtime.LockOSThread).
func PreciseThread() { _ = unix.Prctl(unix.PR_SET_TIMERSLACK, 1, 0, 0, 0) }

// Sleep blocks the calling thread with nanosleep. On a thread prepared by
// PreciseThread it wakes within tens of microseconds.
func Sleep(d time.Duration) {
	if d <= 0 {
		return
	}
	ts := unix.NsecToTimespec(int64(d))
	_ = unix.Nanosleep(&ts, nil)
}

// SleepUntil sleeps until Now() >= t.
func SleepUntil(t time.Duration) {
	for {
		d := t - Now()
		if d <= 0 {
			return
		}
		Sleep(d)
	}
}

var reserved atomic.Int32

// ReserveThreads raises GOMAXPROCS by n for n goroutines that will sleep
// with Sleep on locked threads. A thread blocked in nanosleep keeps its P
// until the runtime's monitor takes it back, which can take 10 ms when the
// process is otherwise idle; spare Ps keep other goroutines (TUN readers,
// probe receivers) from waiting that long.
func ReserveThreads(n int) {
	total := reserved.Add(int32(n))
	want := runtime.NumCPU() + int(total)
	if runtime.GOMAXPROCS(0) < want {
		runtime.GOMAXPROCS(want)
	}
}
