package reliability

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cilium/ebpf/link"

	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/vethhosts"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
	"mpsteer/internal/testutil"
)

// world: two namespaces joined by n veth links; the client's addresses
// 2..n are subflow endpoints under the kernel path manager (or the client
// runs the userspace path manager, and the daemon opens subflows).
type world struct {
	h         testutil.Hosts
	cli, srv  *pm.Client
	userspace bool
}

func newWorld(t *testing.T, n int, userspace bool) *world {
	t.Helper()
	testutil.RequireLab(t)
	return setupWorld(t, testutil.TwoHosts(t, n), userspace)
}

var parentSeq atomic.Int32

// newSmallHashWorld is newWorld with namespaces whose TCP socket hash has
// ehash buckets of their own (net.ipv4.tcp_child_ehash_entries, which
// applies to namespaces created from one where it is set): sampling them
// walks their sockets, not the host's whole hash.
func newSmallHashWorld(t *testing.T, n, ehash int) *world {
	t.Helper()
	testutil.RequireLab(t)
	parent := fmt.Sprintf("mpr%d-%d-p", os.Getpid()%100000, parentSeq.Add(1))
	if err := netnsutil.Create(parent); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { netnsutil.Delete(parent) })
	if err := netnsutil.Sysctl(parent, "net.ipv4.tcp_child_ehash_entries", fmt.Sprint(ehash)); err != nil {
		t.Fatal(err)
	}
	var h testutil.Hosts
	if err := netnsutil.Do(parent, func() error {
		var err error
		h, err = vethhosts.New(n)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := h.Close(); err != nil {
			t.Errorf("remove namespaces: %v", err)
		}
	})
	return setupWorld(t, h, false)
}

func setupWorld(t *testing.T, h testutil.Hosts, userspace bool) *world {
	t.Helper()
	w := &world{h: h, userspace: userspace}
	w.cli, w.srv = testutil.DialPM(t, h.Client), testutil.DialPM(t, h.Server)
	for _, c := range []*pm.Client{w.cli, w.srv} {
		if err := c.SetLimits(pm.Limits{AddAddrAccepted: 8, Subflows: 8}); err != nil {
			t.Fatal(err)
		}
	}
	if userspace {
		if err := netnsutil.SetPathManager(h.Client, "userspace"); err != nil {
			t.Fatal(err)
		}
		return w
	}
	for i := 2; i <= h.N; i++ {
		if _, err := w.cli.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(i), Flags: pm.FlagSubflow}); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

func (w *world) endpoints(t *testing.T) map[netip.Addr]pm.Flags {
	t.Helper()
	return testutil.EndpointFlags(t, w.cli)
}

// transfer is an MPTCP upload of a seeded pseudo-random stream that the
// receiver checks byte for byte: nothing lost, duplicated or changed.
type transfer struct {
	conn     net.Conn
	ln       net.Listener
	cancel   context.CancelFunc
	sent     atomic.Int64
	recv     atomic.Int64
	bad      atomic.Int64 // bytes that differ from the stream
	mptcp    bool
	sendErr  chan error
	recvErr  chan error
	stopOnce sync.Once
	res      transferResult
}

type transferResult struct {
	Sent, Received, Mismatched int64
	MPTCP                      bool
	Err                        string
}

var portSeq atomic.Int32

// startTransfer sends at about rate bits per second until stop.
func startTransfer(t *testing.T, w *world, rate float64) *transfer {
	t.Helper()
	port := uint16(20000 + portSeq.Add(1))
	var ln net.Listener
	if err := netnsutil.Do(w.h.Server, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", fmt.Sprintf("0.0.0.0:%d", port))
		return err
	}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tr := &transfer{ln: ln, cancel: cancel, sendErr: make(chan error, 1), recvErr: make(chan error, 1)}
	seed := uint64(time.Now().UnixNano())
	go func() {
		c, err := ln.Accept()
		if err != nil {
			tr.recvErr <- err
			return
		}
		defer c.Close()
		want := rand.NewChaCha8(seedBytes(seed))
		buf, exp := make([]byte, 64<<10), make([]byte, 64<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				want.Read(exp[:n])
				for i := 0; i < n; i++ {
					if buf[i] != exp[i] {
						tr.bad.Add(1)
					}
				}
				tr.recv.Add(int64(n))
			}
			if err != nil {
				if errors.Is(err, io.EOF) {
					err = nil
				}
				tr.recvErr <- err
				return
			}
		}
	}()
	if err := netnsutil.Do(w.h.Client, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		d.SetMultipathTCP(true)
		var err error
		tr.conn, err = d.Dial("tcp", netip.AddrPortFrom(w.h.ServerAddr(1), port).String())
		return err
	}); err != nil {
		cancel()
		ln.Close()
		t.Fatal(err)
	}
	tr.mptcp = traffic.IsMPTCP(tr.conn)
	go func() {
		src := rand.NewChaCha8(seedBytes(seed))
		chunk := make([]byte, 16<<10)
		start := time.Now()
		for ctx.Err() == nil {
			// Paced: never ahead of rate (a shared machine's CPU).
			ahead := time.Duration(float64(tr.sent.Load()*8)/rate*float64(time.Second)) - time.Since(start)
			if ahead > 0 {
				select {
				case <-ctx.Done():
				case <-time.After(ahead):
				}
				continue
			}
			src.Read(chunk)
			tr.conn.SetWriteDeadline(time.Now().Add(30 * time.Second))
			n, err := tr.conn.Write(chunk)
			tr.sent.Add(int64(n))
			if err != nil {
				tr.sendErr <- err
				return
			}
		}
		tr.sendErr <- tr.conn.(*net.TCPConn).CloseWrite()
	}()
	t.Cleanup(func() { tr.stop() })
	return tr
}

func seedBytes(s uint64) (b [32]byte) {
	for i := 0; i < 4; i++ {
		for j := 0; j < 8; j++ {
			b[i*8+j] = byte(s >> (8 * j))
		}
		s = s*6364136223846793005 + 1442695040888963407
	}
	return b
}

// flowing reports the bytes the receiver got during d (a measurement
// window: the caller wants the count over that time).
func (tr *transfer) flowing(d time.Duration) int64 {
	before := tr.recv.Load()
	<-time.After(d)
	return tr.recv.Load() - before
}

// progress reports whether the receiver gets another byte within d (a
// liveness check, not a rate).
func (tr *transfer) progress(d time.Duration) bool {
	before := tr.recv.Load()
	return waitUntil(d, func() bool { return tr.recv.Load() > before })
}

// stop ends the transfer cleanly (the receiver reads to EOF) and reports.
func (tr *transfer) stop() transferResult {
	tr.stopOnce.Do(func() {
		tr.cancel()
		var errs []string
		select {
		case err := <-tr.sendErr:
			if err != nil {
				errs = append(errs, "send: "+err.Error())
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, "send: did not end")
		}
		select {
		case err := <-tr.recvErr:
			if err != nil {
				errs = append(errs, "receive: "+err.Error())
			}
		case <-time.After(30 * time.Second):
			errs = append(errs, "receive: no EOF within 30s")
		}
		tr.conn.Close()
		tr.ln.Close()
		tr.res = transferResult{Sent: tr.sent.Load(), Received: tr.recv.Load(), Mismatched: tr.bad.Load(), MPTCP: tr.mptcp,
			Err: strings.Join(errs, "; ")}
	})
	return tr.res
}

// intact reports whether a finished transfer lost nothing.
func (r transferResult) intact() bool {
	return r.Err == "" && r.Sent == r.Received && r.Mismatched == 0 && r.Sent > 0
}

func (r transferResult) String() string {
	return fmt.Sprintf("sent %d B, received %d B, %d B mismatched, mptcp %v, err %q", r.Sent, r.Received, r.Mismatched, r.MPTCP, r.Err)
}

// logLines counts the daemon log's lines containing every one of subs.
func logLines(t *testing.T, d *testutil.Daemon, subs ...string) int {
	t.Helper()
	b, err := os.ReadFile(d.Log)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
next:
	for _, l := range strings.Split(string(b), "\n") {
		for _, s := range subs {
			if !strings.Contains(l, s) {
				continue next
			}
		}
		n++
	}
	return n
}

// pid of a daemon started through `ip netns exec` (which execs in place).
func pid(d *testutil.Daemon) int { return d.Cmd.Process.Pid }

// linkIDs are the ids of the BPF links a process holds (its fdinfo).
func linkIDs(t *testing.T, pid int) []uint32 {
	t.Helper()
	dir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var ids []uint32
	for _, e := range ents {
		if l, _ := os.Readlink(dir + "/" + e.Name()); l != "anon_inode:bpf_link" {
			continue
		}
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/fdinfo/%s", pid, e.Name()))
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if v, ok := strings.CutPrefix(l, "link_id:"); ok {
				var id uint32
				fmt.Sscan(strings.TrimSpace(v), &id)
				ids = append(ids, id)
			}
		}
	}
	return ids
}

// liveLinks counts the links of ids the kernel still has.
func liveLinks(ids []uint32) int {
	n := 0
	for _, id := range ids {
		if l, err := link.NewFromID(link.ID(id)); err == nil {
			l.Close()
			n++
		}
	}
	return n
}

// metrics reads a daemon's Prometheus text (started with --metrics
// 127.0.0.1:9900 in its namespace).
func metricsText(t *testing.T, ns string) string {
	t.Helper()
	s, err := testutil.HTTPGetIn(ns, "http://127.0.0.1:9900/metrics")
	if err != nil {
		t.Fatalf("metrics: %v", err)
	}
	return s
}

func metric(t *testing.T, text, name string, labels ...string) float64 {
	t.Helper()
	v, ok := Metric(text, name, labels...)
	if !ok {
		t.Fatalf("metrics have no %s %v", name, labels)
	}
	return v
}

// record writes the case's record and logs it.
func record(t *testing.T, r Record, start time.Time) {
	t.Helper()
	if r.Tried == 0 {
		return // filtered out (go test -run)
	}
	r.At = time.Now().UTC()
	r.Soak = Soak()
	r.Seconds = time.Since(start).Seconds()
	if r.Command == "" {
		r.Command = "make soak"
		if !r.Soak {
			r.Command = "go test ./internal/reliability -run " + t.Name()
		}
	}
	if err := Write(r); err != nil {
		t.Errorf("write record: %v", err)
	}
	b, _ := json.Marshal(r)
	t.Logf("record: %s", b)
}

// pick is short in make test, long under make soak.
func pick[T any](short, soak T) T {
	if Soak() {
		return soak
	}
	return short
}

// waitUntil waits until cond holds, at most d; it reports whether it
// does.
func waitUntil(d time.Duration, cond func() bool) bool {
	return testutil.WaitFor(d, func() error {
		if !cond() {
			return errors.New("not yet")
		}
		return nil
	}) == nil
}

// steering waits until the daemon d steers the transfer tr: bytes arrive,
// and the daemon's status shows the connection with at least subflows
// subflows. Tests measure and fault what runs, never a guessed delay after
// the start.
func steering(t *testing.T, d *testutil.Daemon, tr *transfer, subflows int) {
	t.Helper()
	testutil.Eventually(t, 15*time.Second, func() error {
		if tr.recv.Load() == 0 {
			return errors.New("no byte of the transfer arrived")
		}
		st, err := d.Client.Status()
		if err != nil {
			return err
		}
		for _, c := range st.Connections {
			if len(c.Subflows) >= subflows {
				return nil
			}
		}
		return fmt.Errorf("the daemon shows no connection with %d subflows: %+v", subflows, st.Connections)
	})
}

// trigger is how many rounds of the daemon's loop the trigger started
// (status loop.triggers).
func trigger(t *testing.T, d *testutil.Daemon, name string) uint64 {
	t.Helper()
	st, err := d.Client.Status()
	if err != nil {
		t.Fatalf("status: %v", err)
	}
	if st.Loop == nil {
		t.Fatal("status has no loop section")
	}
	return st.Loop.Triggers[name]
}

// showLog logs the daemon's log when MPSTEER_REL_LOG is set (debugging).
func showLog(t *testing.T, d *testutil.Daemon) {
	if os.Getenv("MPSTEER_REL_LOG") == "" {
		return
	}
	b, _ := os.ReadFile(d.Log)
	t.Logf("daemon log:\n%s", b)
}

// lostText is a record's Lost: "nothing", or what was lost, joined.
func lostText(problems []string) string {
	if len(problems) == 0 {
		return "nothing"
	}
	return strings.Join(problems, "; ")
}
