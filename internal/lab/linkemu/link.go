package linkemu

import (
	"context"
	"errors"
	"log"
	"os"
	"runtime"
	"sync"
	"time"

	"mpsteer/internal/monoclock"
)

// Device is one end of an emulated link: a TUN device with virtio-net
// headers (golang.zx2c4.com/wireguard/tun), which reads GSO super-packets
// split into MTU-sized segments and writes batches coalesced again (GRO).
type Device interface {
	Read(bufs [][]byte, sizes []int, offset int) (int, error)
	Write(bufs [][]byte, offset int) (int, error)
	BatchSize() int
	Close() error
}

// Headroom is kept in front of every packet for the virtio-net header that
// the TUN writer prepends.
const Headroom = 16

// segBufSize holds one MTU-sized segment (MTU is 1500 in the lab).
const segBufSize = 2048

// writeBufSize holds a coalesced write of up to 64 KiB.
const writeBufSize = 65535 + Headroom

// Now is the emulator's clock (see monoclock).
func Now() time.Duration { return monoclock.Now() }

var segPool = sync.Pool{New: func() any { b := make([]byte, segBufSize+Headroom); return &b }}

type packet struct {
	buf *[]byte
	n   int
	due time.Duration
}

// Direction moves packets one way through a Pipe.
type Direction struct {
	Name string
	from Device
	to   Device

	mu    sync.Mutex
	pipe  *Pipe
	queue []packet // delivery times never decrease (the pipe keeps order)
	head  int
	wake  chan struct{}

	readErrs, writeErrs uint64
	// recent counts what the pipe did over the last moments (recent.go).
	recent recent
}

// NewDirection connects from → to through pipe.
func NewDirection(name string, from, to Device, pipe *Pipe) *Direction {
	return &Direction{Name: name, from: from, to: to, pipe: pipe, wake: make(chan struct{}, 1)}
}

// With runs fn with the pipe locked, for changing it while traffic flows.
func (d *Direction) With(fn func(p *Pipe)) {
	d.mu.Lock()
	defer d.mu.Unlock()
	fn(d.pipe)
}

// Run moves packets until ctx ends or a device is closed.
func (d *Direction) Run(ctx context.Context) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); d.readLoop(ctx) }()
	go func() { defer wg.Done(); d.writeLoop(ctx) }()
	wg.Wait()
}

func (d *Direction) readLoop(ctx context.Context) {
	batch := max(d.from.BatchSize(), 128)
	bufs := make([][]byte, batch)
	ptrs := make([]*[]byte, batch)
	for i := range bufs {
		ptrs[i] = segPool.Get().(*[]byte)
		bufs[i] = *ptrs[i]
	}
	sizes := make([]int, batch)
	for ctx.Err() == nil {
		n, err := d.from.Read(bufs, sizes, Headroom)
		if err != nil {
			if errors.Is(err, os.ErrClosed) || ctx.Err() != nil {
				return
			}
			d.readErrs++
			if d.readErrs < 5 {
				log.Printf("%s: read: %v", d.Name, err)
			}
			continue
		}
		now := Now()
		d.mu.Lock()
		for i := 0; i < n; i++ {
			due, v := d.pipe.Admit(now, sizes[i])
			d.recent.add(now, v)
			if v != Deliver {
				continue
			}
			if HasTCPPayload((*ptrs[i])[Headroom : Headroom+sizes[i]]) {
				d.pipe.NoteData(now)
			}
			d.queue = append(d.queue, packet{buf: ptrs[i], n: sizes[i], due: due})
			ptrs[i] = segPool.Get().(*[]byte)
			bufs[i] = *ptrs[i]
		}
		d.mu.Unlock()
		select {
		case d.wake <- struct{}{}:
		default:
		}
	}
}

// writeLoop sleeps until the head packet is due and writes every packet
// that is due by then. It owns its OS thread so that it can sleep with
// nanosecond timer slack: Go's timers are too coarse for 1 ms links.
func (d *Direction) writeLoop(ctx context.Context) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	monoclock.PreciseThread()

	const maxBatch = 64
	scratch := make([][]byte, maxBatch)
	for i := range scratch {
		scratch[i] = make([]byte, writeBufSize)
	}
	out := make([][]byte, 0, maxBatch)
	var done []*[]byte
	stop := ctx.Done()
	for {
		d.mu.Lock()
		if d.head == len(d.queue) {
			d.queue, d.head = d.queue[:0], 0
			d.mu.Unlock()
			select {
			case <-d.wake:
			case <-stop:
				return
			}
			continue
		}
		due := d.queue[d.head].due
		d.mu.Unlock()

		if wait := due - Now(); wait > 0 {
			monoclock.Sleep(min(wait, 50*time.Millisecond))
			if ctx.Err() != nil {
				return
			}
			continue
		}
		now := Now()
		out = out[:0]
		done = done[:0]
		d.mu.Lock()
		for d.head < len(d.queue) && len(out) < maxBatch && d.queue[d.head].due <= now {
			pk := d.queue[d.head]
			d.queue[d.head] = packet{}
			d.head++
			b := scratch[len(out)][:Headroom+pk.n]
			copy(b[Headroom:], (*pk.buf)[Headroom:Headroom+pk.n])
			out = append(out, b)
			done = append(done, pk.buf)
		}
		// Keep the queue from growing without bound at its front.
		if d.head > 4096 && d.head*2 > len(d.queue) {
			d.queue = append(d.queue[:0], d.queue[d.head:]...)
			d.head = 0
		}
		d.mu.Unlock()
		for _, b := range done {
			segPool.Put(b)
		}
		if _, err := d.to.Write(out, Headroom); err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			d.writeErrs++
			if d.writeErrs < 5 {
				log.Printf("%s: write: %v", d.Name, err)
			}
		}
	}
}

// Stats returns the pipe's counters.
func (d *Direction) Stats() Stats {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pipe.Stats()
}

// HasTCPPayload reports whether an IP packet is a TCP segment with data.
func HasTCPPayload(p []byte) bool {
	if len(p) < 20 {
		return false
	}
	var ihl, total int
	var proto byte
	switch p[0] >> 4 {
	case 4:
		ihl, total, proto = int(p[0]&0x0f)*4, int(p[2])<<8|int(p[3]), p[9]
	case 6:
		if len(p) < 40 {
			return false
		}
		ihl, total, proto = 40, 40+(int(p[4])<<8|int(p[5])), p[6]
	default:
		return false
	}
	if proto != 6 || len(p) < ihl+20 {
		return false
	}
	doff := int(p[ihl+12]>>4) * 4
	return total > ihl+doff
}
