package datapath

import (
	"io"
	"math/rand/v2"
	"net"
	"os/exec"
	"path/filepath"
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

// Every built-in selector and actor, as a chain may write them.
var (
	allSelectors = []string{
		"tuple(src=10.1.0.1:5000, dst=10.1.0.2:80)", "tuple(dst=[fd00:1::2]:80)", "pair(10.1.0.1, 10.1.0.2)",
		"pair(fd00:1::1, fd00:1::2)", "src(10.0.0.0/8)", "dst(fd00::/16)", "src(10.1.0.1)", "dst(0.0.0.0/0)",
		"seq(0, 4294967296)", "seq(4294967000, 2000)", "dseq(0, 100000)", "type(data|data-ack)", "type(add-addr)",
	}
	allActors = []string{
		"set_backup", "clear_backup(force)", "strip_add_addr", "clamp_rwnd(64KiB)", "clamp_rwnd(10mbit, egress)",
		"drop", "mark(mark=7, classid=1:10)", "count",
	}
)

// maxStepChains are chains of MaxSteps steps: each selector and each
// actor filling a chain, everything together, and seeded random mixes
// (random and/or/not shapes, random actors).
func maxStepChains() [][2]string {
	var out [][2]string
	for _, s := range allSelectors {
		parts := make([]string, MaxSteps-1)
		for i := range parts {
			parts[i] = s
		}
		// AND groups of three, ORed: misses and matches jump around
		var groups []string
		for i := 0; i < len(parts); i += 3 {
			groups = append(groups, strings.Join(parts[i:min(i+3, len(parts))], " and "))
		}
		out = append(out, [2]string{strings.Join(groups, " or "), "count"})
	}
	for _, a := range allActors {
		acts := make([]string, MaxSteps)
		for i := range acts {
			acts[i] = a
		}
		out = append(out, [2]string{"", strings.Join(acts, " ")})
	}
	sel := strings.Join(allSelectors, " and ") + " or not (" + strings.Join(allSelectors[:5], " or ") + ")"
	acts := slices.Clone(allActors)
	for len(acts) < MaxSteps-len(allSelectors)-5 {
		acts = append(acts, allActors[len(acts)%len(allActors)])
	}
	out = append(out, [2]string{sel, strings.Join(acts, " ")})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 40 {
		nsel := rng.IntN(MaxSteps)
		var expr []string
		for i := 0; i < nsel; i++ {
			s := allSelectors[rng.IntN(len(allSelectors))]
			if rng.IntN(4) == 0 {
				s = "not " + s
			}
			if i > 0 {
				expr = append(expr, []string{"and", "or"}[rng.IntN(2)])
			}
			expr = append(expr, s)
		}
		var acts []string
		for len(acts) < MaxSteps-nsel {
			acts = append(acts, allActors[rng.IntN(len(allActors))])
		}
		out = append(out, [2]string{strings.Join(expr, " "), strings.Join(acts, " ")})
	}
	return out
}

// The verifier accepts chains of MaxSteps steps of every built-in, and
// they run; load times and the verifier's work are logged.
func TestMaxStepChainsLoadAndRun(t *testing.T) {
	h := newHarness(t)
	pkts := [][]byte{
		build(t, ack(false, v4a, v4b, nop, nop, tsOpt, dssAck)),
		build(t, ack(true, v6a, v6b, nop, nop, tsOpt, dssData)),
		build(t, ack(false, v4a, v4b, dssAck, addAddr4)),
		build(t, ack(false, v4a, v4b, addAddr4)),
	}
	var worst time.Duration
	var worstInsns, maxInsns uint32
	var worstChain string
	n := 0
	for _, c := range maxStepChains() {
		prog, err := Compile(c[0], c[1], nil)
		if err != nil {
			t.Fatalf("%q → %q: %v", c[0], c[1], err)
		}
		if len(prog.Steps) != MaxSteps {
			t.Fatalf("%q → %q compiled to %d steps, not %d", c[0], c[1], len(prog.Steps), MaxSteps)
		}
		n++
		t0 := time.Now()
		id, p, err := h.m.AddDetached(c[0], c[1])
		took := time.Since(t0)
		if err != nil {
			t.Fatalf("%d steps, %q → %q: %v", len(prog.Steps), c[0], c[1], err)
		}
		var insns uint32
		if info, err := p.Info(); err == nil {
			insns, _ = info.VerifiedInstructions()
		}
		maxInsns = max(maxInsns, insns)
		if took > worst {
			worst, worstInsns, worstChain = took, insns, c[0]+" → "+c[1]
		}
		for _, in := range pkts {
			out := make([]byte, len(in)+64)
			ret, err := p.Run(&ebpf.RunOptions{Data: in, DataOut: out})
			if err != nil {
				t.Fatal(err)
			}
			if r := int32(ret); r != tcxNext && r != tcxDrop {
				t.Fatalf("%q → %q: ret %d", c[0], c[1], r)
			}
		}
		if err := h.m.Del(id); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("%d chains of %d steps loaded and ran; at most %d instructions verified; slowest load %v (%d instructions verified): %s", n, MaxSteps, maxInsns, worst, worstInsns, worstChain)
}

// Replacing a chain under a stream of packets: every packet runs one
// version of the chain from its first step to its last. Each version
// counts every packet in each of its steps, so any packet that saw half of
// a version (or half of two) would leave that version's step counters
// unequal, and the versions' counts would not add up to the packets the
// chain selected.
func TestReplaceIsAtomicUnderTraffic(t *testing.T) {
	h := newHarness(t)
	ns := testNetns(t, "mpst-repl")

	versions := []string{"count count", "mark(mark=1) count count count", "count mark(mark=2) count"}
	var id uint32
	var cli, srv net.Conn
	var closeConn func()
	err := netnsutil.Do(ns, func() error {
		st, err := h.m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: versions[0]})
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
			if err := h.m.objs.MpsteerStepCount.Lookup(slot*MaxSteps+uint32(i), &per); err != nil {
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
	h.m.mu.Lock()
	slot := h.m.chains[id].slot
	h.m.mu.Unlock()
	const replaces = 60
	prev := versions[0]
	for i := 1; i <= replaces; i++ {
		time.Sleep(5 * time.Millisecond)
		next := versions[i%len(versions)]
		if err := netnsutil.Do(ns, func() error { _, err := h.m.Replace(id, "", next); return err }); err != nil {
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
	st, err := h.m.Status(id)
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
	h := newHarness(t)
	ns := testNetns(t, "mpst-move")
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
		info, err := h.m.program(id).Info()
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
		sa, err := h.m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: "count"})
		if err != nil {
			return err
		}
		sb, err := h.m.Add(ChainSpec{Dev: "lo", Hook: Ingress, Act: "count"})
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
	before, _ := h.m.Status(a)
	if before.Seen == 0 {
		t.Fatal("the chain saw no packet")
	}
	// The manager works in its network namespace (the daemon's).
	move := func(id, before, after uint32) {
		t.Helper()
		if err := netnsutil.Do(ns, func() error { _, err := h.m.Move(id, before, after); return err }); err != nil {
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
	after, _ := h.m.Status(a)
	if after.Seen <= before.Seen || after.Steps[0].Packets <= before.Steps[0].Packets {
		t.Fatalf("after two moves: seen %d (was %d), counted %d (was %d)", after.Seen, before.Seen, after.Steps[0].Packets, before.Steps[0].Packets)
	}
}

// A loaded actor is reached by tail call and comes back to its chain,
// which goes on with the next step; several of them in one chain.
func TestUserActorsComeBackToTheChain(t *testing.T) {
	h := newHarness(t)
	testutil.RequireTool(t, "clang")
	obj := filepath.Join(t.TempDir(), "stamp.o")
	out, err := exec.Command("clang", "-O2", "-g", "-target", "bpf", "-I", "bpf", "-c", "bpf/template/stamp.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("compile the template: %v\n%s", err, out)
	}
	if err := h.m.LoadActor(obj, "stamp"); err != nil {
		t.Fatal(err)
	}
	id, r := h.chain("type(data-ack)", "count stamp(0x2a) count stamp(0x2b) mark(classid=1:10) count")
	in := build(t, ack(false, v4a, v4b, nop, nop, tsOpt, dssAck))
	got := r(in)
	if got.mark != 0x2b || got.priority != 0x10010 || got.selected != 1 || got.modified != 2 {
		t.Fatalf("mark %#x priority %#x selected %d modified %d", got.mark, got.priority, got.selected, got.modified)
	}
	st, _ := h.m.Status(id)
	for _, i := range []int{1, 3, 6} {
		if st.Steps[i].Packets != 1 {
			t.Fatalf("step %d (%s) counted %d packets, want 1: %+v", i, st.Steps[i].Text, st.Steps[i].Packets, st.Steps)
		}
	}
	// Each loaded actor takes a tail call, and coming back to a built-in
	// step two more: within the kernel's 33 per packet, or refused.
	long := strings.Repeat("stamp(1) count ", 12)
	if _, _, err := h.m.AddDetached("", long); err == nil || !strings.Contains(err.Error(), "tail calls") {
		t.Fatalf("12 loaded actors each followed by a built-in step: %v", err)
	}
	if _, _, err := h.m.AddDetached("", strings.Repeat("stamp(1) ", 20)+"count"); err != nil {
		t.Fatalf("20 loaded actors in a row: %v", err)
	}
	// Replaced, the chain with loaded actors is a new program too.
	if _, err := h.m.Replace(id, "", "stamp(7) count"); err != nil {
		t.Fatal(err)
	}
	if got := r(in); got.mark != 7 {
		t.Fatalf("after replace: mark %#x", got.mark)
	}
	st, _ = h.m.Status(id)
	if st.Steps[1].Packets != 1 {
		t.Fatalf("after replace: %+v", st.Steps)
	}
}
