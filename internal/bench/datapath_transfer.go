package bench

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"mpsteer/internal/datapath"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/lab/vethhosts"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/pm"
	"mpsteer/internal/stats"
)

// TransferResult compares MPTCP uploads over two veth paths with and
// without chains on every packet of the client's devices.
type TransferResult struct {
	Rounds          int     `json:"rounds"`
	SecondsPerRound float64 `json:"seconds_per_round"`
	// Goodput: two identical worlds transfer at the same time, one with
	// chains; the worlds swap roles every round.
	OnMbps       []float64 `json:"goodput_with_chains_mbit_s"`
	OffMbps      []float64 `json:"goodput_without_chains_mbit_s"`
	GoodputRatio float64   `json:"goodput_ratio"`
	// CPU: one world, transfers with and without chains in turn (ABBA),
	// the machine's busy CPU time per transferred GB.
	CPUSecPerGBOff float64 `json:"cpu_s_per_gb_without_chains"`
	CPUSecPerGBOn  float64 `json:"cpu_s_per_gb_with_chains"`
	CPUAddedPct    float64 `json:"cpu_added_pct"`
	// The kernel's own count of the time spent in the chains (BPF
	// run-time statistics) during the rounds with chains, against the
	// machine's busy CPU time in those rounds: the precise figure, where
	// the difference of the two /proc/stat figures above is within noise.
	ChainCPUSec float64 `json:"chain_cpu_s"`
	// The same per GB moved in those rounds: the chains' own cost, which
	// other work on the machine does not inflate the way it inflates
	// busy_cpu_s_with_chains (compare it with cpu_s_per_gb_* measured on
	// a quiet machine).
	ChainCPUSecPerGB float64 `json:"chain_cpu_s_per_gb"`
	BusyCPUSecOn     float64 `json:"busy_cpu_s_with_chains"`
	ChainCPUPct      float64 `json:"chain_cpu_pct_of_busy"`
	// The same time against the machine's capacity (all CPUs for the
	// rounds' wall time): the paper's "extra CPU usage".
	ChainCPUPctCapacity float64 `json:"chain_cpu_pct_of_capacity"`
	ChainNsPerPacket    float64 `json:"chain_ns_per_packet_live"`
	// The same figure for a program that only returns, at the same
	// hooks during the rounds without chains: the floor any TC program
	// pays per packet here (at these packet rates caches are cold).
	NoopNsPerPacket float64 `json:"noop_program_ns_per_packet_live"`
	// The program that only returns, per GB moved in its rounds.
	NoopCPUSecPerGB float64 `json:"noop_program_cpu_s_per_gb"`
	// ChainNsPerPacket / NoopNsPerPacket, both from the same run.
	ChainRatioToNoop float64 `json:"chain_ratio_to_noop_live"`
	// ChainCPUPctAboveNoop: chain_cpu_pct_of_busy less what a program that
	// only returns costs per packet at the same hooks (its share of each
	// packet's measured time, 1/chain_ratio_to_noop_live): the chain's
	// own work, without what every TC program pays here, the kernel's
	// timing of each run (two clock reads) included.
	ChainCPUPctAboveNoop float64 `json:"chain_cpu_pct_of_busy_above_noop"`
	// RunTimingNs is what the kernel's run-time statistics, which the
	// live figures come from, add to every run of a program (two clock
	// reads and the counters' update): a program that only returns timed
	// by BPF_PROG_TEST_RUN with the statistics on, less off, in the same
	// run (the median over rounds). A machine running without the
	// statistics, as it does by default, does not pay it.
	RunTimingNs float64 `json:"run_timing_ns"`
	// ChainCPUPctLessTiming: chain_cpu_pct_of_busy without the run timing
	// (each packet's measured time less run_timing_ns): what the chains
	// cost where nobody times them.
	ChainCPUPctLessTiming float64  `json:"chain_cpu_pct_of_busy_less_timing"`
	TargetChainCPUPct     float64  `json:"target_chain_cpu_pct_of_busy"`
	ChainPackets          uint64   `json:"packets_through_chains"`
	Chains                []string `json:"chains"`
	TargetRatio           float64  `json:"target_goodput_ratio"`
	TargetCPUAddedPct     float64  `json:"target_cpu_added_pct"`
	Setup                 string   `json:"setup"`
}

// linkRate shapes each client link of the transfer benchmarks.
const linkRate = 1_000_000_000 // bit/s

// twoPathHosts are two namespaces joined by two veth links shaped to
// linkRate, the client opening a second subflow over link 2.
func twoPathHosts() (vethhosts.Hosts, error) {
	h, err := vethhosts.New(2)
	if err != nil {
		return h, err
	}
	for i := 1; i <= h.N; i++ {
		if err := h.Shape(i, linkRate); err != nil {
			h.Close()
			return h, err
		}
	}
	for _, ns := range []string{h.Client, h.Server} {
		c, err := pm.Dial(pm.Options{NetNSName: ns})
		if err != nil {
			h.Close()
			return h, err
		}
		err = c.SetLimits(pm.Limits{AddAddrAccepted: 2, Subflows: 2})
		if err == nil && ns == h.Client {
			_, err = c.AddEndpoint(pm.Endpoint{Addr: h.ClientAddr(2), Flags: pm.FlagSubflow})
		}
		c.Close()
		if err != nil {
			h.Close()
			return h, err
		}
	}
	return h, nil
}

// Four steps on every packet: a selector that matches everything and
// three actors that do not change what the stack sees.
const transferSelect, transferAct = "dst(10.0.0.0/8)", "count mark(mark=0) count"

// attachAll puts the chain on ingress and egress of the client's devices
// and returns a function that removes them and says how many packets they
// saw.
func attachAll(m *datapath.Manager, h vethhosts.Hosts) (detach func() (packets uint64, cpu time.Duration), err error) {
	var ids []uint32
	detach = func() (packets uint64, cpu time.Duration) {
		for _, id := range ids {
			if st, err := m.Status(id); err == nil {
				packets += st.Seen
				cpu += time.Duration(st.CPUTimeNs)
			}
			m.Del(id)
		}
		return packets, cpu
	}
	err = netnsutil.Do(h.Client, func() error {
		for i := 1; i <= h.N; i++ {
			for _, hook := range []datapath.Hook{datapath.Ingress, datapath.Egress} {
				st, err := m.Add(datapath.ChainSpec{Dev: h.Dev(i), Hook: hook, Select: transferSelect, Act: transferAct})
				if err != nil {
					return err
				}
				ids = append(ids, st.ID)
			}
		}
		return nil
	})
	if err != nil {
		detach()
		return nil, err
	}
	return detach, nil
}

// Transfer measures goodput side by side (rounds rounds) and CPU time in
// turns (rounds pairs), each transfer seconds long.
func Transfer(ctx context.Context, rounds int, seconds float64, progress func(string)) (*TransferResult, error) {
	var worlds [2]vethhosts.Hosts
	for i := range worlds {
		h, err := twoPathHosts()
		if err != nil {
			return nil, err
		}
		defer h.Close()
		worlds[i] = h
	}
	m, err := datapath.NewManager()
	if err != nil {
		return nil, err
	}
	defer m.Close()
	res := &TransferResult{Rounds: rounds, SecondsPerRound: seconds, TargetRatio: 0.99, TargetCPUAddedPct: 1, TargetChainCPUPct: 1,
		Setup: fmt.Sprintf("MPTCP uploads over two veth links per world, each shaped to %d Mbit/s by TBF on the client (unshaped MPTCP over veth swings 2-20 Gbit/s between runs on this kernel), 2 subflows; chains on ingress and egress of both client devices", linkRate/1_000_000)}
	for i := 1; i <= 2; i++ {
		for _, hook := range []string{"ingress", "egress"} {
			res.Chains = append(res.Chains, fmt.Sprintf("veth%d %s: select %q act %q", i, hook, transferSelect, transferAct))
		}
	}

	var onBytes, offBytes float64
	for r := 0; r < rounds; r++ {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		with := worlds[r%2]
		detach, err := attachAll(m, with)
		if err != nil {
			return nil, err
		}
		var out [2]struct {
			mbps, bytes float64
			err         error
		}
		done := make(chan int, 2)
		for i := range worlds {
			go func() {
				out[i].mbps, out[i].bytes, out[i].err = upload(ctx, worlds[i], seconds)
				done <- i
			}()
		}
		<-done
		<-done
		n, _ := detach()
		res.ChainPackets += n
		for i := range out {
			if out[i].err != nil {
				return nil, out[i].err
			}
		}
		on, off := out[r%2], out[1-r%2]
		res.OnMbps = append(res.OnMbps, on.mbps)
		res.OffMbps = append(res.OffMbps, off.mbps)
		onBytes, offBytes = onBytes+on.bytes, offBytes+off.bytes
		progress(fmt.Sprintf("datapath: side by side %d/%d: %.0f Mbit/s with chains, %.0f Mbit/s without", r+1, rounds, on.mbps, off.mbps))
	}
	res.GoodputRatio = onBytes / offBytes

	// What the statistics add to a run, measured before they go on.
	if res.RunTimingNs, err = runTimingNs(10, 1_000_000); err != nil {
		return nil, fmt.Errorf("run timing: %w", err)
	}
	stats, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
	if err != nil {
		return nil, fmt.Errorf("BPF run-time statistics: %w", err)
	}
	defer stats.Close()
	var cpuOff, cpuOn, bytesOff, bytesOn float64
	var chainCPU, noopCPU, wallOn time.Duration
	var chainPackets, noopPackets uint64
	for r := 0; r < rounds; r++ {
		pair := []bool{false, true}
		if r%2 == 1 {
			pair = []bool{true, false}
		}
		for _, on := range pair {
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
			var detach func() (uint64, time.Duration)
			if on {
				detach, err = attachAll(m, worlds[0])
			} else {
				detach, err = attachNoop(worlds[0])
			}
			if err != nil {
				return nil, err
			}
			before, err := busyCPU()
			if err != nil {
				return nil, err
			}
			t0 := time.Now()
			mbps, bytes, err := upload(ctx, worlds[0], seconds)
			after, _ := busyCPU()
			if on {
				wallOn += time.Since(t0)
			}
			n, cpu := detach()
			if on {
				res.ChainPackets += n
				chainPackets += n
				chainCPU += cpu
			} else {
				noopPackets += n
				noopCPU += cpu
			}
			if err != nil {
				return nil, err
			}
			if on {
				cpuOn, bytesOn = cpuOn+after-before, bytesOn+bytes
			} else {
				cpuOff, bytesOff = cpuOff+after-before, bytesOff+bytes
			}
			progress(fmt.Sprintf("datapath: in turn %d/%d, chains %v: %.0f Mbit/s, %.2f CPU-s/GB", r+1, rounds, on, mbps, (after-before)/(bytes/1e9)))
		}
	}
	res.CPUSecPerGBOff, res.CPUSecPerGBOn = cpuOff/(bytesOff/1e9), cpuOn/(bytesOn/1e9)
	res.CPUAddedPct = (res.CPUSecPerGBOn/res.CPUSecPerGBOff - 1) * 100
	res.ChainCPUSec, res.BusyCPUSecOn = chainCPU.Seconds(), cpuOn
	res.ChainCPUSecPerGB = chainCPU.Seconds() / (bytesOn / 1e9)
	res.ChainCPUPct = chainCPU.Seconds() / cpuOn * 100
	res.ChainCPUPctCapacity = chainCPU.Seconds() / (wallOn.Seconds() * float64(runtime.NumCPU())) * 100
	if chainPackets > 0 {
		res.ChainNsPerPacket = float64(chainCPU.Nanoseconds()) / float64(chainPackets)
	}
	if noopPackets > 0 {
		res.NoopNsPerPacket = float64(noopCPU.Nanoseconds()) / float64(noopPackets)
	}
	res.NoopCPUSecPerGB = noopCPU.Seconds() / (bytesOff / 1e9)
	if res.NoopNsPerPacket > 0 {
		res.ChainRatioToNoop = res.ChainNsPerPacket / res.NoopNsPerPacket
		res.ChainCPUPctAboveNoop = res.ChainCPUPct * max(0, 1-1/res.ChainRatioToNoop)
	}
	if res.ChainNsPerPacket > 0 {
		res.ChainCPUPctLessTiming = res.ChainCPUPct * max(0, 1-res.RunTimingNs/res.ChainNsPerPacket)
	}
	return res, nil
}

// runTimingNs is what the kernel's run-time statistics add to each run of
// a program (see TransferResult.RunTimingNs): a program that only returns,
// timed by the kernel's repeat loop with the statistics off and on in
// turn, rounds times; the median of on − off. Where something else keeps
// the statistics on, both are timed with them and it is 0: the live
// figures are then taken whole.
func runTimingNs(rounds, repeat int) (float64, error) {
	prog, err := noopProgram()
	if err != nil {
		return 0, err
	}
	defer prog.Close()
	x := &variant{pkt: make([]byte, 14+20+20), prog: prog} // an Ethernet header at least
	diffs := make([]float64, 0, rounds)
	for r := 0; r < rounds; r++ {
		off, err := timeChain(x, repeat, 0)
		if err != nil {
			return 0, err
		}
		st, err := ebpf.EnableStats(unix.BPF_STATS_RUN_TIME)
		if err != nil {
			return 0, err
		}
		on, err := timeChain(x, repeat, 0)
		st.Close()
		if err != nil {
			return 0, err
		}
		diffs = append(diffs, on-off)
	}
	return max(0, stats.Float64s(diffs, 0.5)[0]), nil
}

// noopProgram is a TC program that only returns "next": the unit of the
// datapath figures.
func noopProgram() (*ebpf.Program, error) {
	return ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.SchedCLS, License: "GPL",
		Instructions: asm.Instructions{asm.Mov.Imm(asm.R0, -1), asm.Return()}}) // TCX_NEXT
}

// attachNoop puts a program that only returns "next" on the hooks the
// chains use.
func attachNoop(h vethhosts.Hosts) (detach func() (packets uint64, cpu time.Duration), err error) {
	prog, err := noopProgram()
	if err != nil {
		return nil, err
	}
	var links []link.Link
	detach = func() (uint64, time.Duration) {
		for _, l := range links {
			l.Close()
		}
		defer prog.Close()
		if st, err := prog.Stats(); err == nil {
			return st.RunCount, st.Runtime
		}
		return 0, 0
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
		detach()
		return nil, err
	}
	return detach, nil
}

// upload runs one bulk upload and returns its goodput and bytes.
func upload(ctx context.Context, h vethhosts.Hosts, seconds float64) (mbps, bytes float64, err error) {
	b := &traffic.Bulk{ClientNS: h.Client, ServerNS: h.Server, Server: netip.AddrPortFrom(h.ServerAddr(1), 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: time.Duration(seconds * float64(time.Second))}
	r, err := b.Run(ctx)
	if err != nil {
		return 0, 0, err
	}
	if !r.MPTCP {
		return 0, 0, fmt.Errorf("the transfer fell back to TCP")
	}
	first, last := b.Meter.Span()
	if last <= first {
		return 0, 0, fmt.Errorf("the transfer moved no data")
	}
	return float64(r.Bytes) * 8 / 1e6 / (last - first).Seconds(), float64(r.Bytes), nil
}

// busyCPU is the machine's non-idle CPU time so far, in seconds.
func busyCPU() (float64, error) {
	f, err := os.Open("/proc/stat")
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || fields[0] != "cpu" {
			continue
		}
		var busy uint64
		for i, s := range fields[1:] {
			v, err := strconv.ParseUint(s, 10, 64)
			if err != nil {
				return 0, fmt.Errorf("/proc/stat: %q: %w", s, err)
			}
			if i != 3 && i != 4 && i < 7 { // not idle, iowait, steal, guest (guest is in user)
				busy += v
			}
		}
		return float64(busy) / 100, nil // USER_HZ
	}
	return 0, fmt.Errorf("/proc/stat: no cpu line")
}

// ---- control ------------------------------------------------------------------

// ControlResult is the time from `mpsteer chain add` to the chain acting
// on a live transfer's packets.
type ControlResult struct {
	Samples int `json:"samples"`
	// From starting the command to the chain's first packet (kernel time
	// of the packet, CLOCK_MONOTONIC).
	StartToFirstMedianMs float64 `json:"start_to_first_packet_median_ms"`
	StartToFirstP99Ms    float64 `json:"start_to_first_packet_p99_ms"`
	// The command's own duration (process start, API call, BPF load and
	// attach, exit).
	CommandMedianMs float64 `json:"command_median_ms"`
	CommandP99Ms    float64 `json:"command_p99_ms"`
	// First packet minus the command's return: negative when the chain
	// was already working before the command returned.
	ReturnToFirstMedianMs float64 `json:"return_to_first_packet_median_ms"`
	ReturnToFirstMaxMs    float64 `json:"return_to_first_packet_max_ms"`
	Setup                 string  `json:"setup"`
}

func monotonic() time.Duration {
	var ts unix.Timespec
	unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return time.Duration(ts.Nano())
}

// Control runs the real daemon next to a live upload and adds a chain n
// times with the real CLI, deleting it in between.
func Control(ctx context.Context, binary string, n int) (*ControlResult, error) {
	h, err := twoPathHosts()
	if err != nil {
		return nil, err
	}
	defer h.Close()
	d, err := startDaemon(binary, h.Client, "policies: []\n")
	if err != nil {
		return nil, err
	}
	defer d.stop()
	tctx, stopTraffic := context.WithCancel(ctx)
	done := make(chan error, 1)
	b := &traffic.Bulk{ClientNS: h.Client, ServerNS: h.Server, Server: netip.AddrPortFrom(h.ServerAddr(1), 5201),
		Proto: traffic.MPTCP, Upload: true, Duration: time.Hour}
	go func() {
		_, err := b.Run(tctx)
		done <- err
	}()
	defer func() { stopTraffic(); <-done }()
	// The transfer is running: the server reads bytes (ACKs arrive).
	for deadline := time.Now().Add(10 * time.Second); b.Meter.Bytes() == 0; {
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the upload the chains are measured on carried nothing in 10 s")
		}
		select {
		case err := <-done:
			done <- err // for the deferred wait
			return nil, fmt.Errorf("the upload the chains are measured on ended before it carried anything: %v", err)
		case <-time.After(10 * time.Millisecond):
		}
	}

	var startTo, cmdDur, retTo []time.Duration
	for i := 0; i < n && ctx.Err() == nil; i++ {
		cmd := exec.Command(binary, "chain", "add", "--socket", d.socket, "--dev", h.Dev(1), "--hook", "ingress", "--act", "count", "--json")
		start := monotonic()
		out, err := cmd.Output()
		ret := monotonic()
		if err != nil {
			return nil, fmt.Errorf("chain add: %w: %s", err, out)
		}
		var st datapath.ChainStatus
		if err := json.Unmarshal(out, &st); err != nil {
			return nil, fmt.Errorf("chain add --json: %w", err)
		}
		var first time.Duration
		for deadline := time.Now().Add(2 * time.Second); first == 0 && time.Now().Before(deadline); {
			var list []datapath.ChainStatus
			if err := d.client.Do(http.MethodGet, "/v1/chains", nil, &list); err != nil {
				return nil, err
			}
			for _, c := range list {
				if c.ID == st.ID && c.FirstNs != 0 {
					first = time.Duration(c.FirstNs)
				}
			}
			time.Sleep(time.Millisecond)
		}
		if first == 0 {
			return nil, fmt.Errorf("chain %d saw no packet within 2 s of a running transfer", st.ID)
		}
		startTo = append(startTo, first-start)
		cmdDur = append(cmdDur, ret-start)
		retTo = append(retTo, first-ret)
		if err := d.client.Do(http.MethodDelete, fmt.Sprintf("/v1/chains/%d", st.ID), nil, nil); err != nil {
			return nil, err
		}
	}
	if len(startTo) == 0 {
		return nil, ctx.Err()
	}
	ms := func(xs []time.Duration, q float64) float64 {
		return float64(stats.Durations(xs, q)[0]) / 1e6
	}
	return &ControlResult{Samples: len(startTo),
		StartToFirstMedianMs: ms(startTo, 0.5), StartToFirstP99Ms: ms(startTo, 0.99),
		CommandMedianMs: ms(cmdDur, 0.5), CommandP99Ms: ms(cmdDur, 0.99),
		ReturnToFirstMedianMs: ms(retTo, 0.5), ReturnToFirstMaxMs: ms(retTo, 1),
		Setup: "daemon in the client namespace, MPTCP upload over two veth links; `mpsteer chain add --act count` on the client's ingress (ACKs arrive continuously); first packet time from the chain's own kernel timestamp"}, nil
}
