package bench

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/gopacket/gopacket"
	"github.com/gopacket/gopacket/layers"

	"mpsteer/internal/bench/helpercost"
	"mpsteer/internal/datapath"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/stats"
)

// DatapathResult is what chains cost: per packet in the kernel, on a
// real MPTCP transfer, and from `mpsteer chain add` to the first packet.
type DatapathResult struct {
	// "ops" and "chains" at the top level, as the issue asks.
	*PerPacketResult
	Transfer *TransferResult `json:"transfer"`
	Control  *ControlResult  `json:"control"`
	Load     *LoadResult     `json:"load"`
}

// Datapath runs the three parts; binary is the mpsteer executable (the
// control part runs its daemon and its chain command).
func Datapath(ctx context.Context, binary string, progress func(string)) (*DatapathResult, error) {
	var r DatapathResult
	var err error
	progress("datapath: per-packet cost of each selector and actor (BPF_PROG_TEST_RUN)")
	if r.PerPacketResult, err = PerPacket(ctx, 10, 100000, 100000); err != nil {
		return nil, fmt.Errorf("per packet: %w", err)
	}
	progress("datapath: MPTCP transfer with and without chains")
	if r.Transfer, err = Transfer(ctx, 3, 4, progress); err != nil {
		return nil, fmt.Errorf("transfer: %w", err)
	}
	progress("datapath: chain add → first packet through the chain")
	if r.Control, err = Control(ctx, binary, 50); err != nil {
		return nil, fmt.Errorf("control: %w", err)
	}
	progress("datapath: time to load (verify) chains of 1 to 32 steps")
	if r.Load, err = Load(ctx, 5); err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	return &r, nil
}

// ---- per packet -------------------------------------------------------------

// OpCost is the cost of one selector or actor, or of the chain entry.
type OpCost struct {
	Name        string     `json:"name"`
	Kind        string     `json:"kind"` // entry, selector or actor
	Expr        string     `json:"expr"`
	NsPerPacket float64    `json:"ns_per_packet"`
	RoundsNs    [2]float64 `json:"rounds_min_max_ns"`
	// RatioToNoop is NsPerPacket over the cost of a program that only
	// returns, timed in the same rounds by the same kernel timer
	// (noop_ns): the median over rounds of the per-round ratio.
	RatioToNoop float64 `json:"ratio_to_noop"`
	// Helpers: the kernel helpers this path calls that cost more than a
	// no-op program's few instructions, and HelpersNs what they cost
	// alone, timed in the same rounds (helpers): the floor under the
	// operation whatever its own code does. AboveHelpersRatio is the
	// rest, the operation's own code, over noop_ns.
	Helpers           []string `json:"helpers,omitempty"`
	HelpersNs         float64  `json:"helpers_ns,omitempty"`
	AboveHelpersRatio float64  `json:"above_helpers_ratio_to_noop,omitempty"`
	Method            string   `json:"method"`
	Counters          counters `json:"counters"`
}

// HelperCost is what one kernel helper costs called alone (a program
// that calls it and returns, less a program that only returns).
type HelperCost struct {
	Key         string     `json:"key"`
	Name        string     `json:"name"`
	NsPerCall   float64    `json:"ns_per_call"`
	RoundsNs    [2]float64 `json:"rounds_min_max_ns"`
	RatioToNoop float64    `json:"ratio_to_noop"`
	Method      string     `json:"method"`
}

// ChainCost is the cost of a whole chain, entry included.
type ChainCost struct {
	Length      int        `json:"length"` // steps
	Select      string     `json:"select"`
	Act         string     `json:"act"`
	NsPerPacket float64    `json:"ns_per_packet"`
	RoundsNs    [2]float64 `json:"rounds_min_max_ns"`
	RatioToNoop float64    `json:"ratio_to_noop"`
	Counters    counters   `json:"counters"`
}

// counters is what the chain's own counters say it did to the packets it
// was given: the proof that the path measured is the one named.
type counters struct {
	Runs     uint64 `json:"runs"`
	Selected uint64 `json:"selected"`
	Modified uint64 `json:"modified"`
	Dropped  uint64 `json:"dropped"`
	Skipped  uint64 `json:"skipped"`
}

type PerPacketResult struct {
	Rounds             int          `json:"rounds"`
	RunsPerRound       int          `json:"repeated_runs_per_round"`
	SingleRunsPerRound int          `json:"single_runs_per_round"`
	Ops                []OpCost     `json:"ops"`
	Chains             []ChainCost  `json:"chains"`
	Helpers            []HelperCost `json:"helpers"`
	// NoopNs is what a program that only returns costs per packet, timed
	// like the read-only chains (the kernel's repeat loop, same packet),
	// in every round next to them: the unit of every ratio_to_noop.
	// NoopSingleRunNs is the same program timed one run per call (what
	// the packet-changing chains are timed with before the count chain
	// timed the same way is subtracted); for reference.
	NoopNs            float64    `json:"noop_ns"`
	NoopRoundsNs      [2]float64 `json:"noop_rounds_min_max_ns"`
	NoopSingleRunNs   float64    `json:"noop_single_run_ns"`
	TargetOpRatio     float64    `json:"target_op_ratio_to_noop"`
	TargetChain8Ratio float64    `json:"target_chain_of_8_ratio_to_noop"`
	TargetOpNs        float64    `json:"target_op_ns"`
	TargetChain8Ns    float64    `json:"target_chain_of_8_ns"`
	PaperSetBackupNs  [2]float64 `json:"emptcp_paper_set_backup_chain_ns"`
	Setup             string     `json:"setup"`
}

// variant is one chain under measurement.
type variant struct {
	sel, act string
	pkt      []byte
	// single: the chain changes the packet, so each run gets a fresh copy
	// (the kernel's repeat loop would run it again on its own output).
	single bool
	// cold: on the manager without the socket cache, so the actors that
	// read the packet's socket look it up for every packet (a flow's
	// first packet; and set_backup's insertion, which the cache would
	// otherwise skip after the first run).
	cold   bool
	m      *datapath.Manager
	id     uint32
	prog   *ebpf.Program
	ns     []float64 // mean per round
	before datapath.ChainStatus
}

// PerPacket times chains with BPF_PROG_TEST_RUN in a namespace that holds
// a real MPTCP connection over loopback, so actors that look up the
// packet's socket find a real subflow. The kernel times each call; a
// "count" chain timed the same way is subtracted, so the entry's and the
// timer's own costs cancel. Read-only chains run `repeat` times per call;
// chains that change the packet run once per call, `single` calls.
func PerPacket(ctx context.Context, rounds, repeat, single int) (*PerPacketResult, error) {
	ns := fmt.Sprintf("mpbench-dp%d", os.Getpid()%100000)
	if err := netnsutil.Create(ns); err != nil {
		return nil, err
	}
	defer netnsutil.Delete(ns)
	if err := netnsutil.Sysctl(ns, "net.mptcp.enabled", "1"); err != nil {
		return nil, err
	}
	m, err := datapath.NewManager()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	cold, err := datapath.NewManagerWith(datapath.Options{NoSocketCache: true})
	if err != nil {
		return nil, err
	}
	defer cold.Close()

	var res *PerPacketResult
	err = netnsutil.Do(ns, func() error {
		srv, cli, closeConn, err := loopbackMPTCP()
		if err != nil {
			return err
		}
		defer closeConn()
		// Packets the client's subflow receives from the server.
		ack := benchPacket(srv, cli)
		withAddAddr := benchPacket(srv, cli, mptcpOpt(3, 5, 10, 2, 0, 2, 1, 2, 3, 4, 5, 6, 7, 8)) // id 5, 10.2.0.2, HMAC
		tuple := fmt.Sprintf("tuple(src=%s, dst=%s)", srv, cli)
		other := fmt.Sprintf("tuple(src=%s, dst=%s)", srv, netip.AddrPortFrom(cli.Addr(), cli.Port()+1))
		all := "and src(127.0.0.0/8) and type(data-ack) and seq(0, 4294967296)"

		v := map[string]*variant{
			// read-only: the kernel's repeat loop
			"count":  {act: "count", pkt: ack},
			"count2": {act: "count count", pkt: ack},
			"tuple":  {sel: tuple, act: "count", pkt: ack},
			"prefix": {sel: "src(127.0.0.0/8)", act: "count", pkt: ack},
			"seq":    {sel: "seq(0, 4294967296)", act: "count", pkt: ack},
			"type":   {sel: "type(data-ack)", act: "count", pkt: ack},
			"mark":   {act: "mark(mark=7)", pkt: ack},
			"drop":   {act: "drop", pkt: ack},
			// the common case of the rewriting actors: nothing to do
			"backup/steady":      {act: "clear_backup", pkt: ack},
			"backup/steady/cold": {act: "clear_backup", pkt: ack, cold: true},
			"strip/none":         {act: "strip_add_addr", pkt: ack},
			"chain8/ro":          {sel: tuple + " " + all, act: "mark(mark=7) count count count", pkt: ack},
			// packet-changing: one run per call
			"count/1":         {act: "count", pkt: ack, single: true},
			"count/1+addr":    {act: "count", pkt: withAddAddr, single: true},
			"set_backup":      {act: "set_backup", pkt: ack, single: true, cold: true},
			"clamp_rwnd":      {act: "clamp_rwnd(64KiB)", pkt: ack, single: true},
			"clamp_rwnd/cold": {act: "clamp_rwnd(64KiB)", pkt: ack, single: true, cold: true},
			"strip":           {act: "strip_add_addr", pkt: withAddAddr, single: true},
			"chain2":          {sel: tuple, act: "count", pkt: ack, single: true},
			"chain4":          {sel: tuple, act: "mark(mark=7) clamp_rwnd(64KiB) count", pkt: ack, single: true},
			"chain4/miss":     {sel: other, act: "mark(mark=7) clamp_rwnd(64KiB) count", pkt: ack, single: true},
			"chain8":          {sel: tuple + " " + all, act: "mark(mark=7) clamp_rwnd(64KiB) count count", pkt: ack, single: true},
			"chain/backup":    {sel: "type(data-ack)", act: "set_backup", pkt: ack, single: true, cold: true},
			"chain/backup8":   {sel: tuple + " " + all, act: "mark(mark=7) clamp_rwnd(64KiB) set_backup count", pkt: ack, single: true, cold: true},
		}
		// The unit: a program that only returns, timed the same ways.
		noopProg, err := noopProgram()
		if err != nil {
			return err
		}
		defer noopProg.Close()
		noop := &variant{pkt: ack, prog: noopProg}
		noop1 := &variant{pkt: ack, prog: noopProg, single: true}
		names := make([]string, 0, len(v))
		for name, x := range v {
			x.m = m
			if x.cold {
				x.m = cold
			}
			id, prog, err := x.m.AddDetached(x.sel, x.act)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			x.id, x.prog = id, prog
			st, _ := x.m.Status(id)
			x.before = *st
			names = append(names, name)
		}
		// Kernel helpers alone, timed the same ways (see helpercost).
		hs, err := helpercost.Load(srv, cli)
		if err != nil {
			return err
		}
		defer hs.Close()
		for _, h := range hs.Helpers {
			name := "helper/" + h.Key
			v[name] = &variant{pkt: ack, prog: h.Prog, single: h.Single}
			names = append(names, name)
		}
		sort.Strings(names)
		defer func() {
			for _, x := range v {
				if x.m != nil { // not the no-op or a helper's program
					x.m.Del(x.id)
				}
			}
		}()
		// Rounds interleave the variants, so a noisy moment of this
		// shared machine hits them all alike.
		for r := 0; r < rounds; r++ {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, name := range names {
				x := v[name]
				mean, err := timeChain(x, repeat, single)
				if err != nil {
					return fmt.Errorf("%s: %w", name, err)
				}
				x.ns = append(x.ns, mean)
			}
			for _, x := range []*variant{noop, noop1} {
				mean, err := timeChain(x, repeat, single)
				if err != nil {
					return fmt.Errorf("noop: %w", err)
				}
				x.ns = append(x.ns, mean)
			}
		}
		v["noop"], v["noop/1"] = noop, noop1
		if n, err := hs.Found(); err != nil || n != uint64(rounds*repeat) {
			return fmt.Errorf("helper sk_lookup: found the connection's socket in %d of %d runs (%v): the lookup was not timed on hits", n, rounds*repeat, err)
		}
		res = &PerPacketResult{Rounds: rounds, RunsPerRound: repeat, SingleRunsPerRound: single,
			TargetOpNs: 100, TargetChain8Ns: 300, PaperSetBackupNs: [2]float64{640, 900},
			TargetOpRatio: 1.5, TargetChain8Ratio: 3,
			Setup: fmt.Sprintf("BPF_PROG_TEST_RUN in a namespace with an MPTCP connection over loopback; packet: IPv4 ACK %s → %s with timestamps and DSS data-ack (ADD_ADDR added for strip_add_addr); read-only chains: the kernel's repeat loop, timed around the call; packet-changing chains: one run per call, the kernel's own time of it; ratio_to_noop: over a program that only returns, timed in the same rounds (noop_ns)", srv, cli)}
		return derive(res, v, hs.Helpers)
	})
	return res, err
}

// timeChain returns the mean time of one run of the chain. Read-only
// chains: the kernel's repeat loop, timed around the call (the kernel's
// own mean is in whole nanoseconds, too coarse for ratios of ~20 ns; the
// call's fixed cost, a few µs, adds well under 0.1 ns per run).
// Packet-changing chains: one run per call, the kernel's time of that run,
// averaged over the calls.
func timeChain(x *variant, repeat, single int) (float64, error) {
	if !x.single {
		t0 := time.Now()
		_, _, err := x.prog.Benchmark(x.pkt, repeat, nil)
		return float64(time.Since(t0).Nanoseconds()) / float64(repeat), err
	}
	var sum float64
	for i := 0; i < single; i++ {
		_, d, err := x.prog.Benchmark(x.pkt, 1, nil)
		if err != nil {
			return 0, err
		}
		sum += float64(d.Nanoseconds())
	}
	return sum / float64(single), nil
}

// derive turns the timed chains into costs per operation. Per round:
// count = T(count count) − T(count); entry = T(count) − count; a
// selector = T(selector → count) − T(count); an actor = T(actor) −
// T(count) + count, with both timed the same way.
func derive(res *PerPacketResult, v map[string]*variant, helpers []helpercost.Helper) error {
	rounds := len(v["count"].ns)
	per := func(f func(r int) float64) (float64, [2]float64) {
		xs := make([]float64, rounds)
		for r := range xs {
			xs[r] = f(r)
		}
		q := stats.Float64s(xs, 0, 0.5, 1)
		return q[1], [2]float64{q[0], q[2]}
	}
	t := func(name string, r int) float64 { return v[name].ns[r] }
	count := func(r int) float64 { return t("count2", r) - t("count", r) }
	res.NoopNs, res.NoopRoundsNs = per(func(r int) float64 { return t("noop", r) })
	res.NoopSingleRunNs, _ = per(func(r int) float64 { return t("noop/1", r) })
	// ratio: the median over rounds of f(r) / noop(r).
	ratio := func(f func(r int) float64) float64 {
		q, _ := per(func(r int) float64 { return f(r) / t("noop", r) })
		return q
	}
	did := func(name string) (counters, error) {
		x := v[name]
		st, err := x.m.Status(x.id)
		if err != nil {
			return counters{}, err
		}
		return counters{Runs: st.Seen - x.before.Seen, Selected: st.Selected - x.before.Selected,
			Modified: st.Modified - x.before.Modified, Dropped: st.Dropped - x.before.Dropped, Skipped: st.Skipped - x.before.Skipped}, nil
	}
	op := func(name, kind, label string, f func(r int) float64) error {
		c, err := did(name)
		if err != nil {
			return err
		}
		o := OpCost{Name: label, Kind: kind, Expr: v[name].sel + v[name].act, Counters: c,
			Method: "repeat loop, minus the count chain"}
		if v[name].single {
			o.Method = "one run per call, minus a count chain timed the same way"
		}
		o.NsPerPacket, o.RoundsNs = per(f)
		o.RatioToNoop = ratio(f)
		res.Ops = append(res.Ops, o)
		return nil
	}
	sel := func(name string) func(int) float64 {
		return func(r int) float64 { return t(name, r) - t("count", r) }
	}
	act := func(name, base string) func(int) float64 {
		return func(r int) float64 { return t(name, r) - t(base, r) + count(r) }
	}
	// The helpers alone: each program less the no-op timed the same way.
	helper := map[string]func(int) float64{}
	for _, h := range helpers {
		name, base := "helper/"+h.Key, "noop"
		method := "repeat loop, less the no-op program"
		if h.Single {
			base, method = "noop/1", "one run per call, less the no-op program timed the same way"
		}
		f := func(r int) float64 { return t(name, r) - t(base, r) }
		hc := HelperCost{Key: h.Key, Name: h.Name, Method: method}
		hc.NsPerCall, hc.RoundsNs = per(f)
		hc.RatioToNoop = ratio(f)
		res.Helpers = append(res.Helpers, hc)
		helper[h.Key] = f
	}
	// effect: what the chain's counters must show for every run, so that
	// what is timed is the path that is named; helpers: the kernel
	// helpers that path calls (see OpCost.Helpers).
	steps := []struct {
		name, kind, label, effect string
		f                         func(int) float64
		helpers                   []string
	}{
		{"count", "entry", "entry (the chain's program: run it, parse IP and TCP)", "", func(r int) float64 { return t("count", r) - count(r) }, nil},
		{"tuple", "selector", "tuple", "", sel("tuple"), nil},
		{"prefix", "selector", "src/dst prefix", "", sel("prefix"), nil},
		{"seq", "selector", "seq", "", sel("seq"), nil},
		{"type", "selector", "type", "", sel("type"), nil},
		{"count2", "actor", "count", "", count, nil},
		{"mark", "actor", "mark", "", act("mark", "count"), nil},
		{"drop", "actor", "drop", "dropped", act("drop", "count"), nil},
		{"set_backup", "actor", "set_backup, flag to change (socket lookup, MP_PRIO inserted)", "modified", act("set_backup", "count/1"),
			[]string{"sk_lookup", "load_bytes", "change_tail", "store_bytes", "store_bytes", "l4_csum_replace", "l4_csum_replace"}},
		{"backup/steady", "actor", "set_backup/clear_backup, flag already right (the flow's socket read kept from its last packet)", "", act("backup/steady", "count"), nil},
		{"backup/steady/cold", "actor", "set_backup/clear_backup, flag already right, a flow's first packet (socket lookup)", "", act("backup/steady/cold", "count"), []string{"sk_lookup"}},
		{"clamp_rwnd", "actor", "clamp_rwnd (the flow's socket read kept, window rewritten)", "modified", act("clamp_rwnd", "count/1"), []string{"store_bytes"}},
		{"clamp_rwnd/cold", "actor", "clamp_rwnd, a flow's first packet (socket lookup, window rewritten)", "modified", act("clamp_rwnd/cold", "count/1"), []string{"sk_lookup", "store_bytes"}},
		{"strip", "actor", "strip_add_addr, packet with ADD_ADDR (kept and blanked)", "modified", act("strip", "count/1+addr"),
			[]string{"load_bytes", "hash_lookup", "ktime_coarse", "load_bytes", "csum_diff", "store_bytes", "l4_csum_replace"}},
		{"strip/none", "actor", "strip_add_addr, packet without ADD_ADDR", "", act("strip/none", "count"), nil},
	}
	for _, s := range steps {
		for _, k := range s.helpers {
			if helper[k] == nil {
				return fmt.Errorf("%s: no helper %q was timed", s.name, k)
			}
		}
		if err := op(s.name, s.kind, s.label, s.f); err != nil {
			return err
		}
		o := &res.Ops[len(res.Ops)-1]
		if len(s.helpers) > 0 {
			floor := func(r int) float64 {
				var sum float64
				for _, k := range s.helpers {
					sum += helper[k](r)
				}
				return sum
			}
			o.Helpers = s.helpers
			o.HelpersNs, _ = per(floor)
			o.AboveHelpersRatio = ratio(func(r int) float64 { return s.f(r) - floor(r) })
		}
		c := o.Counters
		bad := c.Runs == 0 || c.Selected != c.Runs || c.Skipped != 0
		switch s.effect {
		case "modified":
			bad = bad || c.Modified != c.Runs
		case "dropped":
			bad = bad || c.Dropped != c.Runs
		default:
			bad = bad || c.Modified != 0 || c.Dropped != 0
		}
		if bad {
			return fmt.Errorf("%s: the chain's counters %+v do not show the path named (want every run selected, %s)", o.Name, c, cmp.Or(s.effect, "nothing changed"))
		}
	}
	for _, name := range []string{"chain2", "chain4", "chain4/miss", "chain8/ro", "chain8", "chain/backup", "chain/backup8"} {
		c, err := did(name)
		if err != nil {
			return err
		}
		x := v[name]
		prog, err := datapath.Compile(x.sel, x.act, nil)
		if err != nil {
			return err
		}
		cc := ChainCost{Length: len(prog.Steps), Select: x.sel, Act: x.act, Counters: c}
		f := func(r int) float64 { return t(name, r) }
		if x.single {
			f = func(r int) float64 { return t(name, r) - t("count/1", r) + t("count", r) }
		}
		cc.NsPerPacket, cc.RoundsNs = per(f)
		cc.RatioToNoop = ratio(f)
		res.Chains = append(res.Chains, cc)
	}
	return nil
}

// ---- load ---------------------------------------------------------------------

// LoadResult is what it takes to add a chain: building and verifying its
// program (or, with per-step programs, its entry), per chain length.
type LoadResult struct {
	Samples int         `json:"samples"`
	Chains  []LoadChain `json:"chains"`
	Setup   string      `json:"setup"`
}

// LoadChain is one chain's load time.
type LoadChain struct {
	Length   int     `json:"length"`
	Select   string  `json:"select"`
	Act      string  `json:"act"`
	MedianMs float64 `json:"median_ms"`
	MaxMs    float64 `json:"max_ms"`
	// What the kernel reports about the loaded program (0: unknown).
	VerifiedInsns uint32 `json:"verified_insns,omitempty"`
	XlatedInsns   int    `json:"xlated_insns,omitempty"`
	JitedBytes    uint32 `json:"jited_bytes,omitempty"`
}

// LoadChains are chains of 1 to 32 steps that use every built-in selector
// and actor: the load-time cases.
func LoadChains() []struct{ Select, Act string } {
	sels := []string{"tuple(src=10.1.0.1:5000, dst=10.1.0.2:80)", "pair(10.1.0.1, 10.1.0.2)", "src(10.0.0.0/8)",
		"dst(fd00::/16)", "seq(0, 4294967296)", "dseq(0, 100000)", "type(data|data-ack)", "not type(add-addr)"}
	acts := []string{"mark(mark=7, classid=1:10)", "count", "clamp_rwnd(64KiB)", "set_backup", "clamp_rwnd(10mbit, egress)",
		"clear_backup(force)", "strip_add_addr", "count", "drop"}
	return []struct{ Select, Act string }{
		{"", "count"},
		{sels[0], "count"},
		{sels[0], "mark(mark=7) clamp_rwnd(64KiB) count"},
		{strings.Join(sels[:4], " and "), "mark(mark=7) clamp_rwnd(64KiB) set_backup count"},
		{strings.Join(sels, " and "), strings.Join(acts[:8], " ")},
		{strings.Join(sels, " and ") + " or " + strings.Join(sels, " and ") + " or " + strings.Join(sels[:7], " and "),
			strings.Join(acts, " ")},
	}
}

// Load times Manager.AddDetached (compile, build, load and verify) for
// chains of growing length, n times each.
func Load(ctx context.Context, n int) (*LoadResult, error) {
	m, err := datapath.NewManager()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	cold, err := datapath.NewManagerWith(datapath.Options{NoSocketCache: true})
	if err != nil {
		return nil, err
	}
	defer cold.Close()
	res := &LoadResult{Samples: n, Setup: "Manager.AddDetached (compile, load, verify; no attach), then Del; the kernel's verified, translated and JIT-compiled sizes of the chain's program"}
	for _, c := range LoadChains() {
		prog, err := datapath.Compile(c.Select, c.Act, nil)
		if err != nil {
			return nil, err
		}
		lc := LoadChain{Length: len(prog.Steps), Select: c.Select, Act: c.Act}
		var ds []time.Duration
		for i := 0; i < n && ctx.Err() == nil; i++ {
			t0 := time.Now()
			id, p, err := m.AddDetached(c.Select, c.Act)
			ds = append(ds, time.Since(t0))
			if err != nil {
				return nil, fmt.Errorf("%d steps: %w", lc.Length, err)
			}
			if i == 0 {
				if info, err := p.Info(); err == nil {
					lc.VerifiedInsns, _ = info.VerifiedInstructions()
					if insns, err := info.Instructions(); err == nil {
						lc.XlatedInsns = len(insns)
					}
					lc.JitedBytes, _ = info.JitedSize()
				}
			}
			m.Del(id)
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		q := stats.Durations(ds, 0.5, 1)
		lc.MedianMs, lc.MaxMs = float64(q[0])/1e6, float64(q[1])/1e6
		res.Chains = append(res.Chains, lc)
	}
	return res, nil
}

// loopbackMPTCP opens an MPTCP connection over loopback in the current
// namespace and keeps it until closeConn.
func loopbackMPTCP() (srv, cli netip.AddrPort, closeConn func(), err error) {
	c, _, closeConn, err := traffic.LocalPair("tcp", "127.0.0.1:0", true)
	if err != nil {
		return srv, cli, nil, err
	}
	if !traffic.IsMPTCP(c) {
		closeConn()
		return srv, cli, nil, errors.New("the loopback connection fell back to TCP")
	}
	return c.RemoteAddr().(*net.TCPAddr).AddrPort(), c.LocalAddr().(*net.TCPAddr).AddrPort(), closeConn, nil
}

// mptcpOpt is an MPTCP option (kind 30) of the given subtype.
func mptcpOpt(sub byte, rest ...byte) layers.TCPOption {
	data := append([]byte{sub << 4}, rest...)
	return layers.TCPOption{OptionType: 30, OptionLength: uint8(len(data) + 2), OptionData: data}
}

// benchPacket is an Ethernet frame with an IPv4 ACK from → to carrying
// timestamps, a DSS data-ack and extra.
func benchPacket(from, to netip.AddrPort, extra ...layers.TCPOption) []byte {
	nop := layers.TCPOption{OptionType: layers.TCPOptionKindNop, OptionLength: 1}
	ts := layers.TCPOption{OptionType: layers.TCPOptionKindTimestamps, OptionLength: 10, OptionData: []byte{0, 0, 0, 1, 0, 0, 0, 2}}
	opts := append([]layers.TCPOption{nop, nop, ts, mptcpOpt(2, 0x01, 0, 0, 0, 100)}, extra...)
	eth := &layers.Ethernet{SrcMAC: net.HardwareAddr{2, 0, 0, 0, 0, 1}, DstMAC: net.HardwareAddr{2, 0, 0, 0, 0, 2}, EthernetType: layers.EthernetTypeIPv4}
	ip := &layers.IPv4{Version: 4, IHL: 5, TTL: 64, Protocol: layers.IPProtocolTCP, SrcIP: from.Addr().AsSlice(), DstIP: to.Addr().AsSlice()}
	tcp := &layers.TCP{SrcPort: layers.TCPPort(from.Port()), DstPort: layers.TCPPort(to.Port()), Seq: 1000, Ack: 2000, ACK: true, Window: 65535, Options: opts}
	tcp.SetNetworkLayerForChecksum(ip)
	buf := gopacket.NewSerializeBuffer()
	if err := gopacket.SerializeLayers(buf, gopacket.SerializeOptions{FixLengths: true, ComputeChecksums: true}, eth, ip, tcp); err != nil {
		panic(err) // fixed layers: cannot fail
	}
	return buf.Bytes()
}
