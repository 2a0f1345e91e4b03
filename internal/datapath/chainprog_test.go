package datapath

import (
	"io"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"

	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// Replacing a chain under a stream of packets: every packet runs one
// version of the chain from its first step to its last. Each version
// counts every packet in each of its steps, so any packet that saw half of
// a version (or half of two) would leave that version's step counters
// unequal, and the versions' counts would not add up to the packets the
// chain selected.
func TestReplaceIsAtomicUnderTraffic(t *testing.T) {
	m := newTestManager(t)
	ns := testutil.Netns(t, "mpst-repl")

	versions := []string{"count count", "mark(mark=1) count count count", "count mark(mark=2) count"}
	var id uint32
	var cli, srv net.Conn
	var closeConn func()
	err := netnsutil.Do(ns, func() error {
		st, err := m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: versions[0]})
		if err != nil {
			return err
		}
		id = st.ID
		cli, srv, closeConn, err = traffic.LocalPair("tcp", "127.0.0.1:0", false)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	defer closeConn()
	// Small writes with Nagle off: many packets each way.
	cli.(*net.TCPConn).SetNoDelay(true)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := make([]byte, 64)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := cli.Write(buf); err != nil {
				return
			}
		}
	}()
	go func() { defer wg.Done(); io.Copy(io.Discard, srv) }()

	// counts of the version in a slot, by step
	slotCounts := func(slot uint32, steps int) []uint64 {
		out := make([]uint64, steps)
		for i := range out {
			var per [][2]uint64
			if err := m.objs.MpsteerStepCount.Lookup(slot*MaxSteps+uint32(i), &per); err != nil {
				t.Fatal(err)
			}
			for _, v := range per {
				out[i] += v[0]
			}
		}
		return out
	}
	countSteps := func(act string) []int {
		var idx []int
		for i, a := range strings.Fields(act) {
			if a == "count" {
				idx = append(idx, i)
			}
		}
		return idx
	}
	var total uint64
	check := func(slot uint32, act string) {
		c := slotCounts(slot, len(strings.Fields(act)))
		idx := countSteps(act)
		for _, i := range idx[1:] {
			if c[i] != c[idx[0]] {
				t.Fatalf("version %q: step counters %v differ: some packet saw part of it", act, c)
			}
		}
		total += c[idx[0]]
	}
	m.mu.Lock()
	slot := m.chains[id].slot
	m.mu.Unlock()
	const replaces = 60
	prev := versions[0]
	for i := 1; i <= replaces; i++ {
		time.Sleep(5 * time.Millisecond)
		next := versions[i%len(versions)]
		if err := netnsutil.Do(ns, func() error { _, err := m.Replace(id, "", next); return err }); err != nil {
			t.Fatal(err)
		}
		// The replaced version is done once the packets in flight are:
		// read it before its slot is reused (two replaces later).
		time.Sleep(5 * time.Millisecond)
		check(slot, prev)
		slot ^= 1
		prev = next
	}
	close(stop)
	time.Sleep(20 * time.Millisecond)
	closeConn() // the reader ends
	wg.Wait()
	time.Sleep(20 * time.Millisecond)
	check(slot, prev)
	st, err := m.Status(id)
	if err != nil {
		t.Fatal(err)
	}
	if st.Selected == 0 || total != st.Selected {
		t.Fatalf("the versions counted %d packets, the chain selected %d", total, st.Selected)
	}
	t.Logf("%d replaces under traffic: %d packets, each through one whole version", replaces, total)
}

// Move puts a chain before another on its hook, keeps its counters, and
// the chain goes on working.
func TestMoveReordersAndKeepsCounters(t *testing.T) {
	m := newTestManager(t)
	ns := testutil.Netns(t, "mpst-move")
	order := func() []ebpf.ProgramID {
		var ids []ebpf.ProgramID
		err := netnsutil.Do(ns, func() error {
			ifc, err := net.InterfaceByName("lo")
			if err != nil {
				return err
			}
			q, err := link.QueryPrograms(link.QueryOptions{Target: ifc.Index, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			for _, p := range q.Programs {
				ids = append(ids, p.ID)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	progID := func(id uint32) ebpf.ProgramID {
		info, err := m.Program(id).Info()
		if err != nil {
			t.Fatal(err)
		}
		pid, _ := info.ID()
		return pid
	}
	ping := func() {
		err := netnsutil.Do(ns, func() error {
			_, _, closeConn, err := traffic.LocalPair("tcp", "127.0.0.1:0", false)
			if err == nil {
				closeConn()
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	var a, b uint32
	err := netnsutil.Do(ns, func() error {
		sa, err := m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: "count"})
		if err != nil {
			return err
		}
		sb, err := m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: "count"})
		if err != nil {
			return err
		}
		a, b = sa.ID, sb.ID
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	ping()
	if got := order(); !slices.Equal(got, []ebpf.ProgramID{progID(a), progID(b)}) {
		t.Fatalf("order %v, want chain %d then %d", got, a, b)
	}
	before, _ := m.Status(a)
	if before.Seen == 0 {
		t.Fatal("the chain saw no packet")
	}
	// The manager works in its network namespace (the daemon's).
	move := func(id, before, after uint32) {
		t.Helper()
		if err := netnsutil.Do(ns, func() error { _, err := m.Move(id, before, after); return err }); err != nil {
			t.Fatal(err)
		}
	}
	move(a, 0, b)
	if got := order(); !slices.Equal(got, []ebpf.ProgramID{progID(b), progID(a)}) {
		t.Fatalf("after moving %d after %d: order %v", a, b, got)
	}
	move(a, b, 0)
	if got := order(); !slices.Equal(got, []ebpf.ProgramID{progID(a), progID(b)}) {
		t.Fatalf("after moving %d before %d: order %v", a, b, got)
	}
	ping()
	after, _ := m.Status(a)
	if after.Seen <= before.Seen || after.Steps[0].Packets <= before.Steps[0].Packets {
		t.Fatalf("after two moves: seen %d (was %d), counted %d (was %d)", after.Seen, before.Seen, after.Steps[0].Packets, before.Steps[0].Packets)
	}
}
