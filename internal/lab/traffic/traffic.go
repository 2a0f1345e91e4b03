// Package traffic generates lab traffic between two network namespaces:
// bulk transfers, short flows with flow completion times, UDP floods, and
// UDP echo probes. Sockets are made inside the namespaces (and stay there);
// the work itself runs in this process, so that the runner can read byte
// counters directly every 100 ms.
package traffic

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"mpsteer/internal/monoclock"
	"mpsteer/internal/netnsutil"
)

// Now is the clock all lab measurements share (see monoclock).
func Now() time.Duration { return monoclock.Now() }

// Proto is the transport protocol of a generator.
type Proto string

const (
	TCP   Proto = "tcp"
	MPTCP Proto = "mptcp"
)

// Meter counts application bytes received.
type Meter struct {
	bytes atomic.Int64
	first atomic.Int64 // ns of the first byte, 0 = none yet
	last  atomic.Int64 // ns of the latest byte
}

func (m *Meter) add(n int) {
	if n <= 0 {
		return
	}
	now := int64(Now())
	m.first.CompareAndSwap(0, now)
	m.last.Store(now)
	m.bytes.Add(int64(n))
}

// Bytes is the count so far.
func (m *Meter) Bytes() int64 { return m.bytes.Load() }

// Span is when the first and the latest byte arrived.
func (m *Meter) Span() (time.Duration, time.Duration) {
	return time.Duration(m.first.Load()), time.Duration(m.last.Load())
}

// listen binds the port on every address of the server, as a multi-homed
// server does: subflows joining an address the server announced (ADD_ADDR)
// must find the listener too.
func listen(ns string, addr netip.AddrPort, proto Proto) (net.Listener, error) {
	wild := netip.IPv4Unspecified()
	if addr.Addr().Is6() {
		wild = netip.IPv6Unspecified()
	}
	addr = netip.AddrPortFrom(wild, addr.Port())
	var ln net.Listener
	err := netnsutil.Do(ns, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(proto == MPTCP)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", addr.String())
		return err
	})
	return ln, err
}

// LocalPair opens a connection to a fresh listener on addr (port 0) in
// the current namespace; closeAll closes both ends and the listener.
func LocalPair(network, addr string, mptcp bool) (client, server net.Conn, closeAll func(), err error) {
	var lc net.ListenConfig
	lc.SetMultipathTCP(mptcp)
	ln, err := lc.Listen(context.Background(), network, addr)
	if err != nil {
		return nil, nil, nil, err
	}
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := ln.Accept()
		accepted <- c
	}()
	var d net.Dialer
	d.SetMultipathTCP(mptcp)
	client, err = d.Dial(network, ln.Addr().String())
	if err != nil {
		ln.Close()
		return nil, nil, nil, err
	}
	server = <-accepted
	closeAll = func() {
		client.Close()
		if server != nil {
			server.Close()
		}
		ln.Close()
	}
	if server == nil {
		closeAll()
		return nil, nil, nil, fmt.Errorf("accept on %s failed", ln.Addr())
	}
	return client, server, closeAll, nil
}

func dial(ctx context.Context, ns string, local netip.Addr, addr netip.AddrPort, proto Proto) (net.Conn, error) {
	var c net.Conn
	err := netnsutil.Do(ns, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		if local.IsValid() {
			// Bound to a path's address, the connection takes that path
			// (the lab's source-address rules).
			d.LocalAddr = &net.TCPAddr{IP: local.AsSlice()}
		}
		d.SetMultipathTCP(proto == MPTCP)
		var err error
		c, err = d.DialContext(ctx, "tcp", addr.String())
		return err
	})
	return c, err
}

// IsMPTCP reports whether a connection really uses MPTCP (it may have
// fallen back to TCP).
func IsMPTCP(c net.Conn) bool {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return false
	}
	used, err := tc.MultipathTCP()
	return err == nil && used
}

// Bulk is one long transfer, over one connection or several at once.
type Bulk struct {
	ClientNS, ServerNS string
	Server             netip.AddrPort
	// Local is the client's address to connect from (invalid: the one
	// routing picks).
	Local    netip.Addr
	Proto    Proto
	Upload   bool // client → server
	Duration time.Duration
	Size     int64 // in all (split evenly over the streams)
	// Streams: concurrent connections (0 or 1: one).
	Streams int
	// Rates: the sending application's rate schedule (all streams
	// together; none: as fast as the connections take).
	Rates []RateStep
	// BlockingReader: the receiving application sleeps in recv(2) (one
	// thread per connection) instead of reading through Go's poller
	// (epoll, then read); see receiveBlocking.
	BlockingReader bool
	// Meter counts what the receiving application read.
	Meter Meter
}

// RateStep is a sender's rate from At (since the transfer started) on.
type RateStep struct {
	At          time.Duration
	BytesPerSec float64
}

// allowed is how many bytes a sender on this schedule may have written
// by elapsed.
func allowed(steps []RateStep, elapsed time.Duration) float64 {
	var out float64
	for i, st := range steps {
		end := elapsed
		if i+1 < len(steps) {
			end = min(end, steps[i+1].At)
		}
		if end > st.At {
			out += st.BytesPerSec * (end - st.At).Seconds()
		}
	}
	return out
}

// rateAt is the schedule's rate at elapsed.
func rateAt(steps []RateStep, elapsed time.Duration) float64 {
	r := 0.0
	for _, st := range steps {
		if st.At <= elapsed {
			r = st.BytesPerSec
		}
	}
	return r
}

// BulkResult describes a finished transfer.
type BulkResult struct {
	Start    time.Duration // when the connection was opened
	Bytes    int64
	LastByte time.Duration
	MPTCP    bool // every connection did use MPTCP
}

// Run performs the transfer. It returns when the receiver has read
// everything the sender wrote, or ctx ends.
func (b *Bulk) Run(ctx context.Context) (BulkResult, error) {
	var res BulkResult
	n := max(b.Streams, 1)
	ln, err := listen(b.ServerNS, b.Server, b.Proto)
	if err != nil {
		return res, fmt.Errorf("bulk: listen on %s: %w", b.Server, err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, n)
	acceptErr := make(chan error, 1)
	go func() {
		for i := 0; i < n; i++ {
			c, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			accepted <- c
		}
	}()
	res.Start = Now()
	var conns []net.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	res.MPTCP = true
	var clients []net.Conn
	for i := 0; i < n; i++ {
		cc, err := dial(ctx, b.ClientNS, b.Local, b.Server, b.Proto)
		if err != nil {
			return res, fmt.Errorf("bulk: connect to %s (stream %d of %d): %w", b.Server, i+1, n, err)
		}
		conns, clients = append(conns, cc), append(clients, cc)
		res.MPTCP = res.MPTCP && IsMPTCP(cc)
	}
	var servers []net.Conn
	for len(servers) < n {
		select {
		case sc := <-accepted:
			conns, servers = append(conns, sc), append(servers, sc)
		case err := <-acceptErr:
			return res, fmt.Errorf("bulk: accept: %w", err)
		case <-ctx.Done():
			return res, ctx.Err()
		}
	}
	srcs, dsts := clients, servers
	if !b.Upload {
		srcs, dsts = servers, clients
	}
	// Closing every end when ctx ends unblocks the readers and writers.
	stop := context.AfterFunc(ctx, func() {
		for _, c := range conns {
			c.Close()
		}
	})
	defer stop()

	var wg sync.WaitGroup
	errs := make([]error, 2*n)
	// Each stream sends its part of the application's rate.
	var rates []RateStep
	for _, st := range b.Rates {
		rates = append(rates, RateStep{At: st.At, BytesPerSec: st.BytesPerSec / float64(n)})
	}
	for i := range n {
		size := b.Size / int64(n)
		if b.Size > 0 && i == 0 {
			size += b.Size % int64(n)
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[2*i] = send(srcs[i], b.Duration, size, rates)
			if tc, ok := srcs[i].(*net.TCPConn); ok {
				tc.CloseWrite()
			}
		}()
		go func() {
			defer wg.Done()
			if b.BlockingReader {
				errs[2*i+1] = receiveBlocking(ctx, dsts[i], &b.Meter)
			} else {
				errs[2*i+1] = receive(dsts[i], &b.Meter)
			}
		}()
	}
	wg.Wait()
	res.Bytes = b.Meter.Bytes()
	_, res.LastByte = b.Meter.Span()
	if ctx.Err() != nil {
		return res, ctx.Err()
	}
	return res, errors.Join(errs...)
}

var zeros = make([]byte, 256<<10)

// pacedChunk is what a sender with a rate writes at once: small enough
// that the writes come every few milliseconds at tens of Mbit/s;
// burstDepth is the most it sends at once to catch up.
const (
	pacedChunk = 16 << 10
	burstDepth = 50 * time.Millisecond
)

// send writes until d has passed or size bytes are out (0 = no limit),
// at most at the schedule's rates (none: as fast as it can).
func send(c net.Conn, d time.Duration, size int64, rates []RateStep) error {
	start := time.Now()
	var deadline time.Time
	if d > 0 {
		deadline = start.Add(d)
		c.SetWriteDeadline(deadline)
	}
	var sent int64
	var skipped float64 // budget dropped beyond burstDepth
	for {
		chunk := zeros
		if len(rates) > 0 {
			chunk = zeros[:pacedChunk]
			for {
				el := time.Since(start)
				// The budget holds at most burstDepth of the rate: after a
				// stall the application goes on at its rate, it does not
				// send what it could not at once.
				if lag := allowed(rates, el) - skipped - float64(sent) - rateAt(rates, el)*burstDepth.Seconds(); lag > 0 {
					skipped += lag
				}
				need := float64(sent+pacedChunk) - (allowed(rates, el) - skipped)
				if need <= 0 {
					break
				}
				if !deadline.IsZero() && time.Now().After(deadline) {
					return nil // the duration is over
				}
				wait := time.Duration(need / rateAt(rates, el) * float64(time.Second))
				time.Sleep(min(max(wait, 200*time.Microsecond), 10*time.Millisecond))
			}
		}
		if size > 0 {
			if left := size - sent; left < int64(len(chunk)) {
				chunk = chunk[:left]
			}
			if len(chunk) == 0 {
				return nil
			}
		}
		n, err := c.Write(chunk)
		sent += int64(n)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				return nil // the duration is over
			}
			return fmt.Errorf("send: %w", err)
		}
	}
}

func receive(c net.Conn, m *Meter) error {
	buf := make([]byte, 256<<10)
	for {
		n, err := c.Read(buf)
		m.add(n)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("receive: %w", err)
		}
	}
}

// blockingPoll is how often a blocking reader with nothing to read looks
// whether the transfer was called off.
const blockingPoll = 200 * time.Millisecond

// receiveBlocking reads as an application blocked in recv(2) does: its
// thread sleeps in the kernel until data come, instead of being woken by
// epoll and then reading. On MPTCP the two give the sender different
// shares of a shared bottleneck (docs/results.md, coupled congestion
// control: measured, the cause not established; MPTCP's receive path
// does part of its work in the reader's context). The socket is switched
// to blocking mode with a receive timeout, so that the reader sees ctx
// end.
func receiveBlocking(ctx context.Context, c net.Conn, m *Meter) error {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return fmt.Errorf("receive: %T has no file descriptor to block on", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	buf := make([]byte, 256<<10)
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		if rerr = unix.SetNonblock(int(fd), false); rerr != nil {
			return true
		}
		tv := unix.NsecToTimeval(blockingPoll.Nanoseconds())
		if rerr = unix.SetsockoptTimeval(int(fd), unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); rerr != nil {
			return true
		}
		for {
			n, err := unix.Read(int(fd), buf)
			switch {
			case n > 0:
				m.add(n)
			case err == nil:
				return true // the sender closed: everything was read
			case errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR):
				if rerr = ctx.Err(); rerr != nil {
					return true
				}
			default:
				rerr = err
				return true
			}
		}
	})
	if err == nil {
		err = rerr
	}
	if err != nil {
		return fmt.Errorf("receive: %w", err)
	}
	return nil
}

// Flows opens short connections one after another and measures how long
// each takes to complete.
type Flows struct {
	ClientNS, ServerNS string
	Server             netip.AddrPort
	Proto              Proto
	Upload             bool
	Sizes              []int64
	Weights            []float64
	Count              int
	Interval           time.Duration
	Seed               uint64
	Meter              Meter
}

// FlowResult is one completed (or failed) flow.
type FlowResult struct {
	Start time.Duration `json:"start_ns"`
	Size  int64         `json:"size_bytes"`
	FCT   time.Duration `json:"fct_ns"`
	Err   string        `json:"error,omitempty"`
}

// Run starts Count flows, one every Interval (each in its own goroutine so
// that a slow flow does not delay the next start), and waits for all.
func (f *Flows) Run(ctx context.Context) ([]FlowResult, error) {
	ln, err := listen(f.ServerNS, f.Server, f.Proto)
	if err != nil {
		return nil, fmt.Errorf("flows: listen on %s: %w", f.Server, err)
	}
	defer ln.Close()
	go f.serve(ln)
	rng := rand.New(rand.NewPCG(f.Seed, 7))
	results := make([]FlowResult, f.Count)
	var wg sync.WaitGroup
	tick := time.NewTicker(f.Interval)
	defer tick.Stop()
	for i := 0; i < f.Count; i++ {
		size := pick(rng, f.Sizes, f.Weights)
		wg.Add(1)
		go func(i int, size int64) {
			defer wg.Done()
			results[i] = f.one(ctx, size)
		}(i, size)
		if i+1 < f.Count {
			select {
			case <-tick.C:
			case <-ctx.Done():
				wg.Wait()
				return results[:i+1], ctx.Err()
			}
		}
	}
	wg.Wait()
	return results, nil
}

func pick(rng *rand.Rand, sizes []int64, weights []float64) int64 {
	if len(weights) != len(sizes) {
		return sizes[rng.IntN(len(sizes))]
	}
	total := 0.0
	for _, w := range weights {
		total += w
	}
	x := rng.Float64() * total
	for i, w := range weights {
		if x < w {
			return sizes[i]
		}
		x -= w
	}
	return sizes[len(sizes)-1]
}

// Wire protocol of one flow: the client sends an 8-byte header (size,
// high bit = download). Upload: the client then sends size bytes and waits
// for a 1-byte acknowledgement. Download: the server sends size bytes.
func (f *Flows) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go func(c net.Conn) {
			defer c.Close()
			var hdr [8]byte
			if _, err := io.ReadFull(c, hdr[:]); err != nil {
				return
			}
			v := beUint64(hdr[:])
			size, down := int64(v&^(1<<63)), v&(1<<63) != 0
			if down {
				send(c, 0, size, nil)
				return
			}
			buf := make([]byte, 64<<10)
			var got int64
			for got < size {
				n, err := c.Read(buf)
				got += int64(n)
				f.Meter.add(n)
				if err != nil {
					return
				}
			}
			c.Write([]byte{1})
		}(c)
	}
}

func (f *Flows) one(ctx context.Context, size int64) FlowResult {
	r := FlowResult{Start: Now(), Size: size}
	fail := func(err error) FlowResult {
		r.Err = err.Error()
		r.FCT = Now() - r.Start
		return r
	}
	c, err := dial(ctx, f.ClientNS, netip.Addr{}, f.Server, f.Proto)
	if err != nil {
		return fail(err)
	}
	defer c.Close()
	stop := context.AfterFunc(ctx, func() { c.Close() })
	defer stop()
	v := uint64(size)
	if !f.Upload {
		v |= 1 << 63
	}
	var hdr [8]byte
	putBeUint64(hdr[:], v)
	if _, err := c.Write(hdr[:]); err != nil {
		return fail(err)
	}
	if f.Upload {
		if err := send(c, 0, size, nil); err != nil {
			return fail(err)
		}
		var ack [1]byte
		if _, err := io.ReadFull(c, ack[:]); err != nil {
			return fail(err)
		}
	} else {
		buf := make([]byte, 64<<10)
		var got int64
		for got < size {
			n, err := c.Read(buf)
			got += int64(n)
			f.Meter.add(n)
			if err != nil {
				if got < size {
					return fail(fmt.Errorf("flow ended after %d of %d bytes: %w", got, size, err))
				}
			}
		}
	}
	r.FCT = Now() - r.Start
	return r
}

func beUint64(b []byte) uint64 {
	var v uint64
	for _, x := range b[:8] {
		v = v<<8 | uint64(x)
	}
	return v
}

func putBeUint64(b []byte, v uint64) {
	for i := 7; i >= 0; i-- {
		b[i] = byte(v)
		v >>= 8
	}
}
