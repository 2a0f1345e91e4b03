package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/datapath"
	"mpsteer/internal/lab/report"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/vethhosts"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/observe"
	"mpsteer/internal/stats"
)

// The chains' time as a share of the transfer's time, as the number of
// concurrent flows grows: eMPTCP's Figs. 5b and 5c. The paper: "the
// extra operation time of eMPTCP contribute to less than 2% of the total
// transmission time of flows, for all length of the policy chain.
// Moreover, the cost is stable even with the number of concurrent flows
// increasing to 10000" (Fig. 5b, chains of 2, 4 and 8 steps), and with the
// chain fixed at 4 steps and the selector varied "from coarse-grained to
// fine-grained", "the average overhead of eMPTCP is around 0.63% of the
// total packet transmission time" (Fig. 5c).
//
// Here: N concurrent MPTCP uploads (two subflows each, over two veth
// links shaped to 1 Gbit/s each, each flow sending its share of 90% of
// the links) run for the whole measurement; chains
// are put on ingress and egress of the client's two devices, one
// configuration at a time, for a window each, in rounds that rotate the
// order. The kernel's BPF run-time statistics give the time spent in the
// chains and the packets they saw; the share is that time over the
// window's wall time, which is the same as the chains' time per packet
// over the time per packet at the hooks (the window over the packets):
// the paper's reading, where a slower link makes each packet's
// transmission time longer and the share smaller (its Raspberry Pi
// figures). Packets are what the hooks see: GSO and GRO super-packets
// count once.

// OverheadChain is one configuration under measurement.
type OverheadChain struct {
	// Name labels the configuration; Set is "length" (Fig. 5b: every
	// packet selected, chains of 2, 4 and 8 steps), "granularity"
	// (Fig. 5c: 4 steps, selectors from coarse to fine) or "floor" (a
	// program that only returns, at the same hooks: what any TC program
	// pays per packet here, timing included).
	Name        string `json:"name"`
	Set         string `json:"set"`
	Granularity string `json:"granularity,omitempty"`
	Select      string `json:"select,omitempty"`
	Act         string `json:"act,omitempty"`
	Steps       int    `json:"steps"`
	Selectors   int    `json:"selectors"`
	Actors      int    `json:"actors"`
}

// OverheadPoint is one configuration at one number of flows: medians over
// the rounds, with the rounds' range.
type OverheadPoint struct {
	Chain string `json:"chain"`
	Flows int    `json:"flows"`
	// SharePct: the chains' time over the window's wall time, in %.
	SharePct       float64    `json:"share_pct"`
	SharePctRounds [2]float64 `json:"share_pct_rounds_min_max"`
	// SharePctLessTiming: the same without what the run-time statistics
	// add to every run (run_timing_ns per packet): what the chains cost
	// where nobody times them.
	SharePctLessTiming float64 `json:"share_pct_less_timing"`
	// NsPerPacket: the chains' time per packet they saw;
	// TransmissionNsPerPacket: the window's wall time per packet seen at
	// the hooks (all four: the client's data out, its ACKs in).
	NsPerPacket             float64 `json:"ns_per_packet"`
	TransmissionNsPerPacket float64 `json:"transmission_ns_per_packet"`
	// PacketsPerS at the hooks; SelectedShare: the packets the selectors
	// passed to the actors over those seen (all rounds).
	PacketsPerS   float64 `json:"packets_per_s"`
	SelectedShare float64 `json:"selected_share"`
	// SentMbit: what the client's two devices sent in the window, headers
	// and retransmissions included (the links' load).
	SentMbit float64 `json:"sent_mbit"`
	Rounds   int     `json:"rounds"`
}

// OverheadSummary holds the figures set beside the paper's numbers.
type OverheadSummary struct {
	// Fig. 5b: the largest share of any chain length at any number of
	// flows (the paper: under 2% for every length), and the largest
	// share over the smallest across the flow counts, per length, the
	// worst of them (the paper: "stable").
	LengthSharePctMax        float64 `json:"length_share_pct_max"`
	LengthShareSpreadMax     float64 `json:"length_share_max_over_min"`
	LengthSharePctAtMostFlow float64 `json:"length_8_share_pct_at_most_flows"`
	// Fig. 5c: the mean share over the granularities and flow counts
	// (the paper: around 0.63% on average), and the finest over the
	// coarsest at the most flows (the paper: finer selects fewer packets,
	// so costs less).
	GranularitySharePctMean       float64 `json:"granularity_share_pct_mean"`
	GranularityFinestOverCoarsest float64 `json:"granularity_finest_over_coarsest_at_most_flows"`
	// The floor: a program that only returns, its share at the most flows.
	FloorSharePctAtMostFlows float64 `json:"floor_share_pct_at_most_flows"`
}

// OverheadResult is the whole measurement.
type OverheadResult struct {
	Flows            []int           `json:"flows"`
	Rounds           int             `json:"rounds"`
	WindowS          float64         `json:"window_s"`
	LinkRateMbit     float64         `json:"link_rate_mbit_each"`
	Chains           []OverheadChain `json:"chains"`
	Points           []OverheadPoint `json:"points"`
	RunTimingNs      float64         `json:"run_timing_ns"`
	SubflowsJoined   map[int]int     `json:"subflows_joined"`
	Summary          OverheadSummary `json:"summary"`
	Plots            []string        `json:"plots,omitempty"`
	Setup            string          `json:"setup"`
	PaperMapping     string          `json:"paper_mapping"`
	TargetSharePct5b float64         `json:"emptcp_paper_fig5b_share_pct_below"`
	TargetSharePct5c float64         `json:"emptcp_paper_fig5c_share_pct_around"`
}

// OverheadOptions size the measurement.
type OverheadOptions struct {
	Flows  []int         // numbers of concurrent flows (default 1, 10, 100, 1000, 10000)
	Rounds int           // windows per configuration and flow count (default 3)
	Window time.Duration // each configuration's window (default 3 s)
	Out    string        // where the plots go ("": none)
	// Binary is the mpsteer executable: the server's ends of the
	// connections live in its `bench-sink` (a process holds at most
	// 20 000 open files here, and 10 000 connections have 20 000 ends).
	Binary string
}

// overheadBuf is the largest socket buffer of the bench's hosts with n
// flows: 1 MiB, enough for one flow to fill both links (each link's
// 1 Gbit/s over its few ms of queue), down to 32 KiB so that all of them
// stay near 128 MiB: the machine's TCP memory limit is shared by every
// namespace (10 000 backlogged flows with 1 MiB each took 1.3 GiB, most
// of the limit). A flow's share of the links at 10 000 flows is 200
// kbit/s, a few hundred bytes per round trip: 32 KiB does not hold it
// back.
func overheadBuf(n int) string {
	return fmt.Sprintf("4096 16384 %d", min(1<<20, max(32<<10, (128<<20)/n)))
}

// overheadChains are the configurations. The granularities follow the
// paper's selectors (its Table I) from coarse to fine: a destination
// prefix (every packet), a packet type (the client's data segments, not
// the ACKs coming back), an address pair (path 1's data), a subflow's
// 4-tuple (the data of one of the n connections' initial subflows).
func overheadChains(h vethhosts.Hosts, sub netip.AddrPort, srv netip.AddrPort) []OverheadChain {
	every := "dst(10.0.0.0/8)"
	four := "count mark(mark=0) count"
	return []OverheadChain{
		{Name: "floor: a program that only returns", Set: "floor"},
		{Name: "2 steps (1 selector, 1 actor)", Set: "length", Select: every, Act: "count"},
		{Name: "4 steps (1 selector, 3 actors)", Set: "length", Granularity: "every packet", Select: every, Act: four},
		{Name: "8 steps (4 selectors, 4 actors)", Set: "length",
			Select: "dst(10.0.0.0/8) and src(10.0.0.0/8) and seq(0, 4294967296) and not type(add-addr)", Act: "count mark(mark=0) count count"},
		{Name: "4 steps: the data packets (packet type)", Set: "granularity", Granularity: "packet type: data",
			Select: "type(data)", Act: four},
		{Name: "4 steps: one address pair (path 1, client → server)", Set: "granularity", Granularity: "address pair",
			Select: fmt.Sprintf("pair(%s, %s)", h.ClientAddr(1), h.ServerAddr(1)), Act: four},
		{Name: "4 steps: one subflow (4-tuple)", Set: "granularity", Granularity: "subflow (4-tuple)",
			Select: fmt.Sprintf("tuple(src=%s, dst=%s)", sub, srv), Act: four},
	}
}

// Overhead runs the measurement.
func Overhead(ctx context.Context, o OverheadOptions, progress func(string)) (*OverheadResult, error) {
	if len(o.Flows) == 0 {
		o.Flows = []int{1, 10, 100, 1000, 10000}
	}
	if o.Rounds == 0 {
		o.Rounds = 3
	}
	if o.Window == 0 {
		o.Window = 3 * time.Second
	}
	if o.Binary == "" {
		return nil, errors.New("overhead: the mpsteer executable is needed (its bench-sink holds the server's ends)")
	}
	if err := raiseFileLimit(slicesMax(o.Flows) + 1000); err != nil {
		return nil, err
	}
	res := &OverheadResult{Flows: o.Flows, Rounds: o.Rounds, WindowS: o.Window.Seconds(), LinkRateMbit: linkRate / 1e6,
		SubflowsJoined: map[int]int{}, TargetSharePct5b: 2, TargetSharePct5c: 0.63,
		Setup: fmt.Sprintf("N concurrent MPTCP uploads, 2 subflows each, over two veth links shaped to %d Mbit/s each by TBF on the client, each flow sending 1/N of 90%% of the links in chunks of a quarter second of its rate (1448 B to 64 KiB), socket buffers up to 1 MiB, less with many flows (tcp_rmem/tcp_wmem %q at 1 flow, %q at 10 000: about 128 MiB in all); chains on ingress and egress of both client devices, one configuration at a time for a %v window, rounds rotating the order; the kernel's BPF run-time statistics for the chains' time and packets",
			linkRate/1_000_000, overheadBuf(1), overheadBuf(10000), o.Window),
		PaperMapping: "share_pct is the chains' time over the window's wall time: the chains' time per packet over the time per packet at the hooks (the paper's 'percentage it accounts for the total packet processing time', which shrinks where the throughput is lower). length: Fig. 5b (1 selector and 1 actor, 1 and 3, 4 and 4; every packet selected, the paper's coarsest and worst case); granularity: Fig. 5c (4 steps, 1 selector and 3 actors, the selector from every packet to one subflow; selected_share shows what each passes to the actors). The paper's chains run at XDP and TC and are timed per operator with high-resolution timestamps; ours are compiled chains at TCX, timed by the kernel's run-time statistics, whose own cost per run is run_timing_ns (share_pct_less_timing leaves it out)."}
	var err error
	if res.RunTimingNs, err = runTimingNs(10, 1_000_000); err != nil {
		return nil, fmt.Errorf("run timing: %w", err)
	}
	st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return nil, fmt.Errorf("BPF run-time statistics: %w", err)
	}
	defer st.Close()
	m, err := datapath.NewManager()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	for _, n := range o.Flows {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		pts, chains, joined, err := overheadAt(ctx, m, n, o, progress)
		if err != nil {
			return nil, fmt.Errorf("%d flows: %w", n, err)
		}
		res.Chains = chains // the same names and shapes at every n
		res.SubflowsJoined[n] = joined
		for i := range pts {
			if pts[i].NsPerPacket > 0 {
				pts[i].SharePctLessTiming = pts[i].SharePct * max(0, 1-res.RunTimingNs/pts[i].NsPerPacket)
			}
		}
		res.Points = append(res.Points, pts...)
	}
	res.Summary = summarizeOverhead(res)
	if o.Out != "" {
		if res.Plots, err = plotOverhead(res, o.Out); err != nil {
			return nil, err
		}
	}
	return res, nil
}

// overheadAt measures every configuration with n flows running.
func overheadAt(ctx context.Context, m *datapath.Manager, n int, o OverheadOptions, progress func(string)) ([]OverheadPoint, []OverheadChain, int, error) {
	h, err := twoPathHosts()
	if err != nil {
		return nil, nil, 0, err
	}
	defer h.Close()
	for _, ns := range []string{h.Client, h.Server} {
		for _, k := range []string{"net.ipv4.tcp_rmem", "net.ipv4.tcp_wmem"} {
			if err := netnsutil.Sysctl(ns, k, overheadBuf(n)); err != nil {
				return nil, nil, 0, err
			}
		}
		// 10 000 connections arrive faster than one accept loop takes them.
		if err := netnsutil.Sysctl(ns, "net.core.somaxconn", "65535"); err != nil {
			return nil, nil, 0, err
		}
	}
	progress(fmt.Sprintf("overhead: %d flows: opening the connections", n))
	t0 := time.Now()
	fl, err := startFlows(ctx, o.Binary, h, n)
	if err != nil {
		return nil, nil, 0, err
	}
	defer fl.stop()
	progress(fmt.Sprintf("overhead: %d flows: opened in %.1f s; waiting for the second subflows", n, time.Since(t0).Seconds()))
	t0 = time.Now()
	joined, err := waitJoined(ctx, h.Client, 2*n, 30*time.Second)
	if err != nil {
		return nil, nil, 0, err
	}
	progress(fmt.Sprintf("overhead: %d flows: %d subflows in %.1f s", n, joined, time.Since(t0).Seconds()))
	chains := overheadChains(h, fl.first, netip.AddrPortFrom(h.ServerAddr(1), overheadPort))
	for i := range chains {
		c := &chains[i]
		if c.Set == "floor" {
			continue
		}
		prog, err := datapath.Compile(c.Select, c.Act, nil)
		if err != nil {
			return nil, nil, 0, fmt.Errorf("%s: %w", c.Name, err)
		}
		c.Steps, c.Selectors, c.Actors = len(prog.Steps), prog.FirstActor, len(prog.Steps)-prog.FirstActor
	}
	// Warm-up: every flow past its first round trips before the first
	// window.
	select {
	case <-time.After(2 * time.Second):
	case <-ctx.Done():
		return nil, nil, 0, ctx.Err()
	}
	type sample struct {
		share, nsPerPkt, txPerPkt, pps, mbit float64
		seen, selected                       uint64
	}
	got := make([][]sample, len(chains))
	for r := 0; r < o.Rounds; r++ {
		for k := range chains {
			i := (k + r) % len(chains) // each round starts one later
			c := chains[i]
			ta := time.Now()
			a, err := attachOverhead(m, h, c)
			if err != nil {
				return nil, nil, 0, fmt.Errorf("%s: %w", c.Name, err)
			}
			b0, err := sentBytes(h)
			if err != nil {
				a.close()
				return nil, nil, 0, err
			}
			s0, t0 := a.stats(), time.Now()
			attachS := t0.Sub(ta).Seconds()
			select {
			case <-time.After(o.Window):
			case <-ctx.Done():
				a.close()
				return nil, nil, 0, ctx.Err()
			}
			s1, wall := a.stats(), time.Since(t0)
			b1, err := sentBytes(h)
			a.close()
			if err == nil {
				err = fl.err()
			}
			if err == nil {
				err = tcpMemoryCheck()
			}
			if err != nil {
				return nil, nil, 0, err
			}
			seen, sel, cpu := s1.seen-s0.seen, s1.selected-s0.selected, s1.cpu-s0.cpu
			if seen == 0 {
				return nil, nil, 0, fmt.Errorf("%s: the chains saw no packet in %v of %d running flows", c.Name, o.Window, n)
			}
			x := sample{seen: seen, selected: sel, share: float64(cpu) / float64(wall) * 100,
				nsPerPkt: float64(cpu) / float64(seen), txPerPkt: float64(wall) / float64(seen),
				pps: float64(seen) / wall.Seconds(), mbit: float64(b1-b0) * 8 / 1e6 / wall.Seconds()}
			got[i] = append(got[i], x)
			progress(fmt.Sprintf("overhead: %d flows, round %d/%d, %s: %.3f%% (%.0f ns per packet of %.0f ns; %.0f packets/s; %.0f Mbit/s sent; attached in %.1f s)",
				n, r+1, o.Rounds, c.Name, x.share, x.nsPerPkt, x.txPerPkt, x.pps, x.mbit, attachS))
		}
	}
	var pts []OverheadPoint
	for i, c := range chains {
		med := func(f func(sample) float64) float64 {
			xs := make([]float64, len(got[i]))
			for k, s := range got[i] {
				xs[k] = f(s)
			}
			return stats.Float64s(xs, 0.5)[0]
		}
		shares := make([]float64, len(got[i]))
		var seen, sel uint64
		for k, s := range got[i] {
			shares[k] = s.share
			seen, sel = seen+s.seen, sel+s.selected
		}
		q := stats.Float64s(shares, 0, 0.5, 1)
		pts = append(pts, OverheadPoint{Chain: c.Name, Flows: n, SharePct: q[1], SharePctRounds: [2]float64{q[0], q[2]},
			NsPerPacket: med(func(s sample) float64 { return s.nsPerPkt }), TransmissionNsPerPacket: med(func(s sample) float64 { return s.txPerPkt }),
			PacketsPerS: med(func(s sample) float64 { return s.pps }), SentMbit: med(func(s sample) float64 { return s.mbit }),
			SelectedShare: float64(sel) / float64(seen), Rounds: len(got[i])})
	}
	return pts, chains, joined, nil
}

// overheadPort is where the bench's server listens.
const overheadPort = 5201

// flows are N backlogged MPTCP uploads to a bench-sink in the server's
// namespace.
type flows struct {
	conns []net.Conn
	first netip.AddrPort // the first connection's client end (its initial subflow)
	sink  *exec.Cmd
	stdin io.Closer // closing it ends the sink
	wg    sync.WaitGroup
	mu    sync.Mutex
	errs  []error
	done  atomic.Bool
}

func (f *flows) fail(err error) {
	if f.done.Load() {
		return // closing the connections ends the loops
	}
	f.mu.Lock()
	f.errs = append(f.errs, err)
	f.mu.Unlock()
}

func (f *flows) err() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return errors.Join(f.errs...)
}

func (f *flows) stop() {
	f.done.Store(true)
	for _, c := range f.conns {
		c.Close()
	}
	f.wg.Wait()
	f.stdin.Close()
	waited := make(chan struct{})
	go func() { f.sink.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(5 * time.Second):
		f.sink.Process.Kill() // our own child, by its pid
		<-waited
	}
}

// startFlows starts the sink and opens n MPTCP connections from the
// client to it, each sending until stop.
func startFlows(ctx context.Context, binary string, h vethhosts.Hosts, n int) (*flows, error) {
	f := &flows{}
	f.sink = exec.Command(binary, "bench-sink", "--netns", h.Server, "--port", fmt.Sprint(overheadPort))
	stdin, err := f.sink.StdinPipe()
	if err != nil {
		return nil, err
	}
	stdout, err := f.sink.StdoutPipe()
	if err != nil {
		return nil, err
	}
	var stderr strings.Builder
	f.sink.Stderr = &stderr
	f.stdin = stdin
	if err := f.sink.Start(); err != nil {
		return nil, fmt.Errorf("bench-sink: %w", err)
	}
	// The sink says "listening" once its listener is up.
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "listening" {
		f.stop()
		return nil, fmt.Errorf("bench-sink did not start (%q, %v): %s", line, err, stderr.String())
	}
	srv := netip.AddrPortFrom(h.ServerAddr(1), overheadPort)
	err = netnsutil.Do(h.Client, func() error {
		d := net.Dialer{Timeout: 10 * time.Second}
		d.SetMultipathTCP(true)
		for i := 0; i < n; i++ {
			c, err := d.DialContext(ctx, "tcp", srv.String())
			if err != nil {
				return fmt.Errorf("connection %d of %d: %w", i+1, n, err)
			}
			f.conns = append(f.conns, c)
			if !traffic.IsMPTCP(c) {
				return fmt.Errorf("connection %d of %d fell back to TCP", i+1, n)
			}
		}
		return nil
	})
	if err != nil {
		f.stop()
		return nil, err
	}
	f.first = f.conns[0].LocalAddr().(*net.TCPAddr).AddrPort()
	// Each flow sends its share of 90% of the two links, in chunks of a
	// quarter second of its rate: the links stay nearly full, and the
	// sockets hold about a chunk each instead of full buffers (10 000
	// backlogged flows took 1 GiB of the machine's TCP memory, shared by
	// every namespace, even with small buffers).
	rate := 0.9 * 2 * linkRate / 8 / float64(n) // bytes per second per flow
	size := min(64<<10, max(1448, int(rate/4)))
	every := time.Duration(float64(size) / rate * float64(time.Second))
	chunk := make([]byte, size) // only read from: shared by the senders
	for i, c := range f.conns {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			// Spread the first writes over one interval.
			next := time.Now().Add(every * time.Duration(i) / time.Duration(n))
			for {
				if d := time.Until(next); d > 0 {
					time.Sleep(d)
				} else if d < -time.Second {
					next = time.Now() // fell behind: no catching up a backlog
				}
				if _, err := c.Write(chunk); err != nil {
					f.fail(fmt.Errorf("send: %w", err))
					return
				}
				next = next.Add(every)
			}
		}()
	}
	return f, nil
}

// Sink accepts MPTCP connections on port in namespace ns and reads them
// to the end, until stdin closes: the server's ends of the overhead
// measurement, in a process of their own. It writes "listening" when the
// listener is up.
func Sink(ns string, port int, stdin io.Reader, stdout io.Writer) error {
	var ln net.Listener
	err := netnsutil.Do(ns, func() error {
		var lc net.ListenConfig
		lc.SetMultipathTCP(true)
		var err error
		ln, err = lc.Listen(context.Background(), "tcp", fmt.Sprintf(":%d", port))
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, "listening")
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			go func() {
				buf := make([]byte, 8<<10)
				for {
					if _, err := c.Read(buf); err != nil {
						return
					}
				}
			}()
		}
	}()
	io.Copy(io.Discard, stdin) // until the bench closes it (or dies)
	ln.Close()
	mu.Lock()
	defer mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
	return nil
}

// tcpMemoryCheck stops the measurement before the machine's TCP memory,
// which every namespace shares, comes near the point where the kernel
// starts to squeeze all TCP sockets (tcp_mem's pressure threshold): half
// of it is far more than these flows should take.
func tcpMemoryCheck() error {
	limits, err := os.ReadFile("/proc/sys/net/ipv4/tcp_mem")
	if err != nil {
		return err
	}
	var low, pressure, high int64
	if _, err := fmt.Sscan(string(limits), &low, &pressure, &high); err != nil {
		return fmt.Errorf("/proc/sys/net/ipv4/tcp_mem: %w", err)
	}
	stat, err := os.ReadFile("/proc/net/sockstat")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(string(stat), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 || f[0] != "TCP:" {
			continue
		}
		for i := 1; i+1 < len(f); i++ {
			if f[i] != "mem" {
				continue
			}
			var used int64
			if _, err := fmt.Sscan(f[i+1], &used); err == nil && used > pressure/2 {
				return fmt.Errorf("the machine's TCP memory is at %d pages, more than half of tcp_mem's pressure threshold (%d): stopped before it squeezes every TCP socket", used, pressure)
			}
		}
	}
	return nil
}

// sentBytes is what the client's devices have sent so far.
func sentBytes(h vethhosts.Hosts) (uint64, error) {
	nh, err := netnsutil.Netlink(h.Client)
	if err != nil {
		return 0, err
	}
	defer nh.Close()
	var n uint64
	for i := 1; i <= h.N; i++ {
		l, err := nh.LinkByName(h.Dev(i))
		if err != nil {
			return 0, err
		}
		if st := l.Attrs().Statistics; st != nil {
			n += st.TxBytes
		}
	}
	return n, nil
}

// waitJoined waits until the client has want MPTCP subflows (each
// connection's second subflow joined over link 2) or the timeout, and
// returns how many it has.
func waitJoined(ctx context.Context, ns string, want int, timeout time.Duration) (int, error) {
	s, err := observe.NewSamplerIn(ns)
	if err != nil {
		return 0, err
	}
	defer s.Close()
	deadline := time.Now().Add(timeout)
	for {
		sfs, err := s.Subflows()
		if err != nil {
			return 0, err
		}
		if len(sfs) >= want || time.Now().After(deadline) {
			return len(sfs), nil
		}
		select {
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return 0, ctx.Err()
		}
	}
}

// counts are what the programs at the hooks report, summed.
type counts struct {
	seen, selected uint64
	cpu            time.Duration
}

// attachment is a configuration on the four hooks.
type attachment struct {
	stats func() counts
	close func()
}

// attachOverhead puts the configuration on ingress and egress of both
// client devices.
func attachOverhead(m *datapath.Manager, h vethhosts.Hosts, c OverheadChain) (*attachment, error) {
	if c.Set == "floor" {
		return attachFloor(h)
	}
	var ids []uint32
	a := &attachment{
		stats: func() counts {
			var n counts
			for _, id := range ids {
				if st, err := m.Status(id); err == nil {
					n.seen += st.Seen
					n.selected += st.Selected
					n.cpu += time.Duration(st.CPUTimeNs)
				}
			}
			return n
		},
		close: func() {
			for _, id := range ids {
				m.Del(id)
			}
		},
	}
	err := netnsutil.Do(h.Client, func() error {
		for i := 1; i <= h.N; i++ {
			for _, hook := range []datapath.Hook{datapath.Ingress, datapath.Egress} {
				st, err := m.Add(datapath.ChainSpec{Dev: h.Dev(i), Hook: hook, Select: c.Select, Act: c.Act})
				if err != nil {
					return err
				}
				ids = append(ids, st.ID)
			}
		}
		return nil
	})
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// attachFloor puts a program that only returns on the same hooks.
func attachFloor(h vethhosts.Hosts) (*attachment, error) {
	prog, err := noopProgram()
	if err != nil {
		return nil, err
	}
	var links []link.Link
	a := &attachment{
		stats: func() counts {
			st, err := prog.Stats()
			if err != nil {
				return counts{}
			}
			return counts{seen: st.RunCount, selected: st.RunCount, cpu: st.Runtime}
		},
		close: func() {
			for _, l := range links {
				l.Close()
			}
			prog.Close()
		},
	}
	err = netnsutil.Do(h.Client, func() error {
		for i := 1; i <= h.N; i++ {
			ifc, err := net.InterfaceByName(h.Dev(i))
			if err != nil {
				return err
			}
			for _, at := range []ebpf.AttachType{ebpf.AttachTCXIngress, ebpf.AttachTCXEgress} {
				l, err := link.AttachTCX(link.TCXOptions{Interface: ifc.Index, Program: prog, Attach: at})
				if err != nil {
					return err
				}
				links = append(links, l)
			}
		}
		return nil
	})
	if err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

// summarizeOverhead picks the figures set beside the paper's.
func summarizeOverhead(res *OverheadResult) OverheadSummary {
	var s OverheadSummary
	most := slicesMax(res.Flows)
	set := map[string]string{}
	for _, c := range res.Chains {
		set[c.Name] = c.Set
	}
	byChain := map[string][]OverheadPoint{}
	for _, p := range res.Points {
		byChain[p.Chain] = append(byChain[p.Chain], p)
	}
	var gran []float64
	var coarse, fine float64
	for _, c := range res.Chains {
		ps := byChain[c.Name]
		if len(ps) == 0 {
			continue
		}
		lo, hi := ps[0].SharePct, ps[0].SharePct
		for _, p := range ps {
			lo, hi = min(lo, p.SharePct), max(hi, p.SharePct)
			if c.Set == "granularity" || c.Granularity != "" {
				gran = append(gran, p.SharePct)
			}
			if p.Flows != most {
				continue
			}
			switch {
			case c.Set == "floor":
				s.FloorSharePctAtMostFlows = p.SharePct
			case c.Steps == 8:
				s.LengthSharePctAtMostFlow = p.SharePct
			}
			if c.Granularity == "every packet" {
				coarse = p.SharePct
			}
			if c.Granularity == "subflow (4-tuple)" {
				fine = p.SharePct
			}
		}
		if c.Set == "length" {
			s.LengthSharePctMax = max(s.LengthSharePctMax, hi)
			if lo > 0 {
				s.LengthShareSpreadMax = max(s.LengthShareSpreadMax, hi/lo)
			}
		}
	}
	if len(gran) > 0 {
		var sum float64
		for _, g := range gran {
			sum += g
		}
		s.GranularitySharePctMean = sum / float64(len(gran))
	}
	if coarse > 0 {
		s.GranularityFinestOverCoarsest = fine / coarse
	}
	return s
}

// plotOverhead draws Fig. 5b (the lengths) and Fig. 5c (the
// granularities), the share against the flows, each with the floor.
func plotOverhead(res *OverheadResult, dir string) ([]string, error) {
	var files []string
	for _, fig := range []struct{ file, title, set string }{
		{"overhead-length.png", "eMPTCP Fig. 5b: chains of 2, 4 and 8 steps", "length"},
		{"overhead-granularity.png", "eMPTCP Fig. 5c: 4 steps, by selection granularity", "granularity"},
	} {
		var lines []report.Line
		for _, c := range res.Chains {
			in := c.Set == fig.set || c.Set == "floor" || (fig.set == "granularity" && c.Granularity != "")
			if !in {
				continue
			}
			l := report.Line{Name: fmt.Sprintf("%d steps", c.Steps), Dash: c.Set == "floor"}
			switch {
			case c.Set == "floor":
				l.Name = "floor: a no-op program"
			case fig.set == "granularity":
				l.Name = c.Granularity
			}
			var ps []OverheadPoint
			for _, p := range res.Points {
				if p.Chain == c.Name {
					ps = append(ps, p)
				}
			}
			sort.Slice(ps, func(i, j int) bool { return ps[i].Flows < ps[j].Flows })
			for _, p := range ps {
				l.X, l.Y = append(l.X, float64(p.Flows)), append(l.Y, p.SharePct)
				l.Low, l.High = append(l.Low, p.SharePctRounds[0]), append(l.High, p.SharePctRounds[1])
			}
			lines = append(lines, l)
		}
		file := filepath.Join(dir, fig.file)
		if err := report.PlotXYWith(file, fig.title, "concurrent MPTCP flows", "time in the chains / transmission time (%)", lines,
			report.XYOptions{LogX: true, TicksAtData: true}); err != nil {
			return nil, err
		}
		files = append(files, fig.file)
	}
	return files, nil
}

// raiseFileLimit makes room for n open files (the connections' client
// ends), raising the hard limit too where allowed.
func raiseFileLimit(n int) error {
	var lim unix.Rlimit
	if err := unix.Getrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return err
	}
	if lim.Cur >= uint64(n) {
		return nil
	}
	lim.Cur = uint64(n)
	lim.Max = max(lim.Max, lim.Cur)
	if err := unix.Setrlimit(unix.RLIMIT_NOFILE, &lim); err != nil {
		return fmt.Errorf("%d open files needed (one per connection): raising RLIMIT_NOFILE: %w", n, err)
	}
	return nil
}

func slicesMax(xs []int) int {
	m := 0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}
