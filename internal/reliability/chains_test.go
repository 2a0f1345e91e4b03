package reliability

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"strconv"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/datapath"
	"mpsteer/internal/testutil"
)

// TestChainChurn adds, replaces and deletes chains with the `mpsteer chain`
// CLI, as fast as it runs, on both paths of a checked upload: nothing is
// lost or changed (the receiver's check; no chain drops a packet), and a
// chain that stays through it all counts packets. TCP retransmissions
// during the churn are recorded next to those of a baseline as long
// without chain operations (not asserted: a loaded machine makes a few).
func TestChainChurn(t *testing.T) {
	testutil.RequireLab(t)
	start := time.Now()
	n := pick(60, 1000)
	w := newWorld(t, 2, false)
	d := testutil.StartDaemon(t, w.h.Client, "interval: 100ms\nchains:\n  - {id: 1, dev: veth1, hook: egress, act: count}\n")
	tr := startTransfer(t, w, 20e6)
	s := testutil.Sampler(t, w.h.Client)
	retrans := func() (n uint64) {
		sfs, err := s.Subflows()
		if err != nil {
			t.Fatal(err)
		}
		for _, sf := range sfs {
			n += uint64(sf.TotalRetrans)
		}
		return n
	}
	steering(t, d, tr, 2)
	// A baseline: retransmissions over as long without any chain
	// operation (a loaded machine delays ACKs; tail-loss probes count):
	// a measurement window.
	rb := retrans()
	baseline := pick(1500*time.Millisecond, 25*time.Second)
	<-time.After(baseline)
	r0 := retrans()
	baseRetrans := r0 - rb
	cli := func(args ...string) (string, error) {
		out, err := exec.Command(testutil.Binary(t), append(append([]string{"chain"}, args...), "--socket", d.Socket)...).CombinedOutput()
		return string(out), err
	}
	acts := []string{"count", "mark(mark=7) count", "set_backup count", "clear_backup"}
	sels := []string{"", "type(data)", "dst(10.0.0.0/8)", "type(data-ack) or type(mptcp)", "not src(10.9.0.0/16)"}
	rng := rand.New(rand.NewPCG(3, 4))
	var live []uint32
	ops := map[string]int{}
	var errs []string
	var opTimes []time.Duration
	t1 := time.Now()
	for i := 0; i < n; i++ {
		t0 := time.Now()
		switch {
		case len(live) == 0 || len(live) < 4 && rng.IntN(3) == 0:
			dev := []string{"veth1", "veth2"}[rng.IntN(2)]
			out, err := cli("add", "--dev", dev, "--hook", "egress", "--select", sels[rng.IntN(len(sels))], "--act", acts[rng.IntN(len(acts))], "--json")
			if err != nil {
				errs = append(errs, fmt.Sprintf("add: %v: %s", err, out))
				continue
			}
			var st datapath.ChainStatus
			if err := json.Unmarshal([]byte(out), &st); err != nil {
				errs = append(errs, fmt.Sprintf("add: %v: %s", err, out))
				continue
			}
			live = append(live, st.ID)
			ops["add"]++
		case rng.IntN(2) == 0:
			id := live[rng.IntN(len(live))]
			out, err := cli("replace", strconv.Itoa(int(id)), "--select", sels[rng.IntN(len(sels))], "--act", acts[rng.IntN(len(acts))])
			if err != nil {
				errs = append(errs, fmt.Sprintf("replace %d: %v: %s", id, err, out))
				continue
			}
			ops["replace"]++
		default:
			k := rng.IntN(len(live))
			out, err := cli("del", strconv.Itoa(int(live[k])))
			if err != nil {
				errs = append(errs, fmt.Sprintf("del %d: %v: %s", live[k], err, out))
				continue
			}
			live = append(live[:k], live[k+1:]...)
			ops["del"]++
		}
		opTimes = append(opTimes, time.Since(t0))
	}
	r1 := retrans()
	churnDur := time.Since(t1)
	var chains []datapath.ChainStatus
	if err := d.Client.Do("GET", "/v1/chains", nil, &chains); err != nil {
		t.Fatal(err)
	}
	var kept datapath.ChainStatus
	for _, c := range chains {
		if c.ID == 1 {
			kept = c
		}
	}
	if len(chains) != len(live)+1 {
		errs = append(errs, fmt.Sprintf("%d chains listed, %d expected", len(chains), len(live)+1))
	}
	p, _ := ReadProc(pid(d))
	links := p.BPFLinks
	d.Stop(syscall.SIGTERM)
	res := tr.stop()
	if !res.intact() {
		errs = append(errs, "transfer: "+res.String())
	}
	if kept.Seen == 0 {
		errs = append(errs, "the chain kept through the churn saw no packet")
	}
	dropped := uint64(0)
	for _, c := range chains {
		dropped += c.Dropped
	}
	if dropped != 0 {
		errs = append(errs, fmt.Sprintf("the chains dropped %d packets", dropped))
	}
	lost := lostText(errs)
	if len(errs) > 0 {
		t.Error(lost)
	}
	ops["failed"] = len(errs)
	var total time.Duration
	for _, d := range opTimes {
		total += d
	}
	survived := 0
	if len(errs) == 0 {
		survived = n
	}
	record(t, Record{Case: "chain-churn", Fault: fmt.Sprintf("%d chain add/replace/del operations (mpsteer chain CLI) on both paths of a transfer", n),
		Tried: n, Survived: survived, Lost: lost, Measured: map[string]any{
			"ops":                      fmt.Sprint(ops),
			"mean_op_ms":               float64(total.Microseconds()) / float64(max(len(opTimes), 1)) / 1000,
			"retransmits_during_churn": r1 - r0,
			"retransmits_baseline":     baseRetrans,
			"churn_s":                  round2(churnDur.Seconds()),
			"baseline_s":               baseline.Seconds(),
			"kept_chain_packets":       kept.Seen,
			"transfer_bytes":           res.Received,
			"transfer_mismatch":        res.Mismatched,
			"bpf_links_at_end":         links,
			"chains_at_end":            len(chains),
		}}, start)
}
