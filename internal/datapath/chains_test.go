package datapath

import (
	"fmt"
	"io"
	"net"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"github.com/vishvananda/netlink"

	"mpsteer/internal/kernelfeat"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// attachModes are the attachments every test of attached chains runs
// with: TCX, and tc clsact forced (what kernels before 6.6 get).
var attachModes = []AttachMode{AttachTCX, AttachClsact}

func newManagerAttaching(t *testing.T, mode AttachMode) *Manager {
	t.Helper()
	testutil.RequireRoot(t, "loading BPF programs")
	if mode == AttachTCX {
		testutil.RequireFeature(t, kernelfeat.TCX) // before 6.6 the clsact case is the kernel's
	}
	m, err := NewManagerWith(Options{Attach: mode})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m
}

// hookOrder is the programs on ns's lo ingress, in the order they run.
func hookOrder(t *testing.T, ns string, mode AttachMode) []ebpf.ProgramID {
	t.Helper()
	var ids []ebpf.ProgramID
	err := netnsutil.Do(ns, func() error {
		l, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		if mode == AttachTCX {
			q, err := link.QueryPrograms(link.QueryOptions{Target: l.Attrs().Index, Attach: ebpf.AttachTCXIngress})
			if err != nil {
				return err
			}
			for _, p := range q.Programs {
				ids = append(ids, p.ID)
			}
			return nil
		}
		fs, err := netlink.FilterList(l, netlink.HANDLE_MIN_INGRESS)
		if err != nil {
			return err
		}
		sort.SliceStable(fs, func(i, j int) bool { return fs[i].Attrs().Priority < fs[j].Attrs().Priority })
		for _, f := range fs {
			if bf, ok := f.(*netlink.BpfFilter); ok {
				ids = append(ids, ebpf.ProgramID(bf.Id))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func progID(t *testing.T, m *Manager, id uint32) ebpf.ProgramID {
	t.Helper()
	info, err := m.Program(id).Info()
	if err != nil {
		t.Fatal(err)
	}
	pid, _ := info.ID()
	return pid
}

// connectOnce opens and closes a TCP connection over ns's loopback: a
// handful of packets through lo's hooks.
func connectOnce(t *testing.T, ns string) {
	t.Helper()
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

// Replacing a chain under a stream of packets: every packet runs one
// version of the chain from its first step to its last. Each version
// counts every packet in each of its steps, so any packet that saw half of
// a version (or half of two) would leave that version's step counters
// unequal, and the versions' counts would not add up to the packets the
// chain selected. With TCX (bpf_link_update) and with tc (the filter
// replaced in place).
func TestReplaceIsAtomicUnderTraffic(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(string(mode), func(t *testing.T) { testReplaceIsAtomic(t, mode) })
	}
}

func testReplaceIsAtomic(t *testing.T, mode AttachMode) {
	m := newManagerAttaching(t, mode)
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
	// whole is how many packets ran a version, and whether each ran all
	// of it (its count steps agree); a packet still inside the version
	// makes them differ until it leaves.
	whole := func(slot uint32, act string) (uint64, bool) {
		c := slotCounts(slot, len(strings.Fields(act)))
		idx := countSteps(act)
		for _, i := range idx[1:] {
			if c[i] != c[idx[0]] {
				return 0, false
			}
		}
		return c[idx[0]], true
	}
	// counted: packets through the last step of a version.
	counted := func(slot uint32, act string) uint64 {
		idx := countSteps(act)
		return slotCounts(slot, len(strings.Fields(act)))[idx[len(idx)-1]]
	}
	m.mu.Lock()
	slot := m.chains[id].slot
	m.mu.Unlock()
	var total uint64
	const replaces = 60
	prev := versions[0]
	testutil.Holds(t, 10*time.Second, "the first version counts packets", func() bool { return counted(slot, prev) > 0 })
	for i := 1; i <= replaces; i++ {
		next := versions[i%len(versions)]
		if err := netnsutil.Do(ns, func() error { _, err := m.Replace(id, "", next); return err }); err != nil {
			t.Fatal(err)
		}
		// Packets run the new version: the old one gets none but those
		// that were in it. Its counts are read once they agree, before
		// its slot is reused (at the next replace).
		testutil.Holds(t, 10*time.Second, fmt.Sprintf("version %d counts packets", i), func() bool { return counted(slot^1, next) > 0 })
		var n uint64
		testutil.Holds(t, 10*time.Second, fmt.Sprintf("version %q: every packet through all of it", prev), func() bool {
			var ok bool
			n, ok = whole(slot, prev)
			return ok
		})
		total += n
		slot ^= 1
		prev = next
	}
	close(stop)
	closeConn() // the reader ends
	wg.Wait()
	// The last packets (the connection's end) leave the last version;
	// then every packet selected ran one version through.
	testutil.Holds(t, 10*time.Second, "the versions count every packet the chain selected", func() bool {
		n, ok := whole(slot, prev)
		st, err := m.Status(id)
		return ok && err == nil && st.Selected == total+n
	})
	n, _ := whole(slot, prev)
	total += n
	st, _ := m.Status(id)
	if st.Attach != map[AttachMode]string{AttachTCX: "tcx", AttachClsact: "tc clsact"}[mode] {
		t.Errorf("status: attach %q, want %s", st.Attach, mode)
	}
	t.Logf("%s: %d replaces under traffic: %d packets, each through one whole version", st.Attach, replaces, total)
}

// Move puts a chain before another on its hook, keeps its counters, and
// the chain goes on working; chains placed before and after others run in
// that order, with TCX and with tc (its filters' priorities), there
// however many are placed at one spot (tc renumbers them).
func TestChainsKeepTheirOrder(t *testing.T) {
	for _, mode := range attachModes {
		t.Run(string(mode), func(t *testing.T) { testChainsKeepTheirOrder(t, mode) })
	}
}

func testChainsKeepTheirOrder(t *testing.T, mode AttachMode) {
	m := newManagerAttaching(t, mode)
	ns := testutil.Netns(t, "mpst-move")
	add := func(spec ChainSpec) uint32 {
		t.Helper()
		var id uint32
		err := netnsutil.Do(ns, func() error {
			spec.Dev, spec.Hook = "lo", Ingress
			if spec.Act == "" {
				spec.Act = "count"
			}
			st, err := m.Add(spec)
			if err == nil {
				id = st.ID
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	// The manager works in its network namespace (the daemon's).
	move := func(id, before, after uint32) {
		t.Helper()
		if err := netnsutil.Do(ns, func() error { _, err := m.Move(id, before, after); return err }); err != nil {
			t.Fatal(err)
		}
	}
	want := func(what string, ids ...uint32) {
		t.Helper()
		var progs []ebpf.ProgramID
		for _, id := range ids {
			progs = append(progs, progID(t, m, id))
		}
		if got := hookOrder(t, ns, mode); !slices.Equal(got, progs) {
			t.Fatalf("%s: programs %v on the hook, want those of chains %v: %v", what, got, ids, progs)
		}
	}
	a := add(ChainSpec{})
	b := add(ChainSpec{})
	connectOnce(t, ns)
	want("added", a, b)
	before, _ := m.Status(a)
	if before.Seen == 0 {
		t.Fatal("the first chain saw no packet")
	}
	// Both run: a chain that passes a packet on leaves it to the next.
	if st, _ := m.Status(b); st.Seen != before.Seen {
		t.Fatalf("chain %d saw %d packets, chain %d %d: the second chain does not see what the first passes on", a, before.Seen, b, st.Seen)
	}
	move(a, 0, b)
	want("after moving a after b", b, a)
	move(a, b, 0)
	want("after moving a before b", a, b)
	connectOnce(t, ns)
	after, _ := m.Status(a)
	if after.Seen <= before.Seen || after.Steps[0].Packets <= before.Steps[0].Packets {
		t.Fatalf("after two moves: seen %d (was %d), counted %d (was %d)", after.Seen, before.Seen, after.Steps[0].Packets, before.Steps[0].Packets)
	}
	// Placed before and after others, twelve times at one spot: tc has
	// room for seven halvings between two chains, then renumbers.
	c := add(ChainSpec{After: a})
	want("c after a", a, c, b)
	bBefore, _ := m.Status(b)
	order := []uint32{a, c, b}
	last := c
	for range 12 {
		d := add(ChainSpec{Before: last})
		i := slices.Index(order, last)
		order = slices.Insert(order, i, d)
		last = d
	}
	want("twelve chains each added before the last", order...)
	if bAfter, _ := m.Status(b); mode == AttachClsact && bAfter.TCPriority == bBefore.TCPriority {
		t.Errorf("chain %d kept priority %d: the hook was not renumbered", b, bAfter.TCPriority)
	}
	e := add(ChainSpec{Before: a})
	want("a chain added first", append([]uint32{e}, order...)...)
	connectOnce(t, ns)
	for _, id := range append([]uint32{e}, order...) {
		if st, _ := m.Status(id); st.Seen == 0 {
			t.Errorf("chain %d (%s %d) saw no packet", id, st.Attach, st.TCPriority)
		}
	}
}

// tc's clsact qdisc: the manager adds it when a device has none and takes
// it off with its last chain; one that was there stays, and so do other
// filters on it. Filters a dead manager left (tc filters outlive their
// process, unlike TCX links) are removed when a chain is attached there.
func TestClsactQdiscIsTidied(t *testing.T) {
	testutil.RequireTool(t, "tc")
	m := newManagerAttaching(t, AttachClsact)
	ns := testutil.Netns(t, "mpst-qdisc")
	tc := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("ip", append([]string{"netns", "exec", ns, "tc"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("tc %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	hasClsact := func() bool { return strings.Contains(tc("qdisc", "show", "dev", "lo"), "clsact") }
	addDel := func() {
		t.Helper()
		err := netnsutil.Do(ns, func() error {
			st, err := m.Add(ChainSpec{Dev: "lo", Hook: Egress, Act: "count"})
			if err != nil {
				return err
			}
			if !hasClsact() {
				return fmt.Errorf("no clsact qdisc with a chain on it")
			}
			return m.Del(st.ID)
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	addDel()
	if hasClsact() {
		t.Fatal("the clsact qdisc the manager added is still there after its last chain")
	}
	// Someone else's qdisc, with someone else's filter, and the filter a
	// manager that is gone left.
	tc("qdisc", "add", "dev", "lo", "clsact")
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	_, prog, err := m.AddDetached("", "count")
	if err != nil {
		t.Fatal(err)
	}
	err = netnsutil.Do(ns, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		for prio, name := range map[uint16]string{7: "someone-else", 9: fmt.Sprintf("mpsteer-%d-1", gone.Process.Pid)} {
			err := netlink.FilterAdd(&netlink.BpfFilter{FilterAttrs: netlink.FilterAttrs{LinkIndex: lo.Attrs().Index, Parent: netlink.HANDLE_MIN_INGRESS,
				Handle: 1, Priority: prio, Protocol: 3 /* ETH_P_ALL */}, Fd: prog.FD(), Name: name, DirectAction: true})
			if err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	addDel()
	filters := tc("filter", "show", "dev", "lo", "ingress")
	if !hasClsact() || !strings.Contains(filters, "someone-else") {
		t.Fatalf("someone else's qdisc or filter went with the chain:\n%s", filters)
	}
	if strings.Contains(filters, "mpsteer-") {
		t.Fatalf("the filter of a manager that is gone is still there:\n%s", filters)
	}
}

// An attachment asked for in the environment (the daemon's, the kernel
// matrix's) is the manager's when its options leave it open; a wrong one
// is refused with what is valid.
func TestAttachModeFromTheEnvironment(t *testing.T) {
	t.Setenv(AttachEnv, "clsact")
	if mode, err := attachModeFrom(Options{}); mode != AttachClsact || err != nil {
		t.Fatalf("%s=clsact: %q, %v", AttachEnv, mode, err)
	}
	if mode, _ := attachModeFrom(Options{Attach: AttachTCX}); mode != AttachTCX {
		t.Fatalf("options say tcx, the environment clsact: %q", mode)
	}
	t.Setenv(AttachEnv, "xdp")
	if _, err := attachModeFrom(Options{}); err == nil || !strings.Contains(err.Error(), "valid: tcx, clsact") {
		t.Fatalf("%s=xdp: %v", AttachEnv, err)
	}
}

func TestPrioAt(t *testing.T) {
	cases := []struct {
		prios []int
		pos   int
		want  int // -1: none
	}{
		{nil, 0, prioFirst},
		{[]int{prioFirst}, 1, prioFirst + prioStep},
		{[]int{prioFirst}, 0, prioFirst - prioStep},
		{[]int{100, 200}, 1, 150},
		{[]int{100, 101}, 1, -1},
		{[]int{0xffff - 10}, 1, 0xffff - 10 + 5},
		{[]int{10}, 0, 5},
		{[]int{1}, 0, -1},
	}
	for _, c := range cases {
		got, ok := prioAt(c.prios, c.pos)
		if (c.want < 0 && ok) || (c.want >= 0 && (!ok || int(got) != c.want)) {
			t.Errorf("prios %v, at %d: %d, %v; want %d", c.prios, c.pos, got, ok, c.want)
		}
	}
}

// A manager left to choose finds out once, at its first chain, that the
// kernel has no TCX (link.AttachTCX says ErrNotSupported, as before 6.6),
// and attaches that chain and the next ones with tc.
func TestAttachFallsBackToClsactWithoutTCX(t *testing.T) {
	t.Setenv(AttachEnv, "") // left to choose, whatever the run asks for
	m := newManagerAttaching(t, AttachAuto)
	tried := 0
	m.tcxHook = func(link.TCXOptions) (link.Link, error) {
		tried++
		return nil, fmt.Errorf("attach tcx link: %w", ebpf.ErrNotSupported)
	}
	ns := testutil.Netns(t, "mpst-notcx")
	for _, hook := range []Hook{Ingress, Egress, Ingress} {
		var st *ChainStatus
		err := netnsutil.Do(ns, func() error {
			var err error
			st, err = m.Add(ChainSpec{Dev: "lo", Hook: hook, Act: "count"})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		if st.Attach != "tc clsact" || st.TCPriority == 0 {
			t.Fatalf("chain %d: attached with %q, priority %d; want tc clsact", st.ID, st.Attach, st.TCPriority)
		}
	}
	if tried != 1 {
		t.Fatalf("TCX tried %d times, want once", tried)
	}
	connectOnce(t, ns)
	for _, st := range m.List() {
		if st.Seen == 0 {
			t.Errorf("chain %d on %s saw no packet", st.ID, st.Hook)
		}
	}
}
