package datapath_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/reliability"
)

// TestRandomTruncatedPackets feeds every chain program shape (each actor,
// several selectors) random TCP options in packets that are then cut short
// or have a length field broken, through BPF_PROG_TEST_RUN: the program
// always returns a verdict, never changes a malformed packet, and what it
// changes is a valid packet. make soak runs ten times as many and records
// the counts (results/soak/bpf-random-truncated.json).
func TestRandomTruncatedPackets(t *testing.T) {
	h := dt.NewHarness(t)
	start := time.Now()
	per := 5000
	if reliability.Soak() {
		per = 50000
	}
	chains := []struct{ sel, act string }{
		{"", "set_backup(force) strip_add_addr clamp_rwnd(64KiB) count"},
		{"type(data-ack)", "clear_backup mark(mark=7)"},
		{"type(add-addr) or type(mp-prio)", "strip_add_addr"},
		{"dseq(0, 1000000) or seq(100, 200)", "clamp_rwnd(10mbit)"},
		{"not type(mptcp)", "set_backup count"},
		{"src(10.0.0.0/8) or src(fd00::/8)", "drop"},
	}
	rng := rand.New(rand.NewPCG(13, 17))
	var tried, changed, dropped, malformed, untouchedMalformed, refused int
	var broken []string
	for _, c := range chains {
		_, prog, err := h.M.AddDetached(c.sel, c.act)
		if err != nil {
			t.Fatalf("%q → %q: %v", c.sel, c.act, err)
		}
		for i := 0; i < per; i++ {
			in, opts, v6 := dt.RandomOptionsPacket(t, rng)
			l3 := 14
			l4 := l3 + 20
			if v6 {
				l4 = l3 + 40
			}
			bad := true
			switch rng.IntN(4) {
			case 0: // cut anywhere
				in = in[:rng.IntN(len(in))]
			case 1: // cut inside the TCP header or its options
				in = in[:min(len(in), l4+rng.IntN(20+len(opts)+1))]
			case 2: // a length field that lies, or Ethernet padding
				if v6 {
					in[l3+4], in[l3+5] = byte(rng.Uint32()), byte(rng.Uint32())
				} else {
					in[l3+2], in[l3+3] = byte(rng.Uint32()), byte(rng.Uint32())
					in[l3+10], in[l3+11] = 0, 0
					c := dt.Checksum16(in[l3 : l3+20])
					in[l3+10], in[l3+11] = byte(c>>8), byte(c)
				}
				in[l4+12] = byte(rng.IntN(16)) << 4
				dt.FixChecksums(t, ipFrame(in)) // over the packet, not the padding
			default:
				bad = false // well-formed (its options may not be)
			}
			if bad && dt.Validate(ipFrame(in)) == nil {
				bad = false // the cut or the lie happened to leave it valid
			}
			out := make([]byte, len(in)+64)
			run := &ebpf.RunOptions{Data: in, DataOut: out}
			ret, err := prog.Run(run)
			tried++
			if err != nil {
				// The kernel refuses very short frames before the
				// program runs (what a device could not deliver).
				if len(in) < 14+40 {
					refused++
					continue
				}
				t.Fatalf("test run of %d bytes: %v", len(in), err)
			}
			if bad {
				malformed++
			}
			switch r := int32(ret); {
			case r == dt.TCXDrop:
				dropped++
				continue
			case r != dt.TCXNext:
				broken = append(broken, fmt.Sprintf("ret %d", r))
				continue
			}
			if bytes.Equal(run.DataOut, in) {
				if bad {
					untouchedMalformed++
				}
				continue
			}
			changed++
			if bad {
				broken = append(broken, fmt.Sprintf("%q → %q changed a malformed packet\n in %x\nout %x", c.sel, c.act, in, run.DataOut))
			} else if err := dt.Validate(ipFrame(run.DataOut)); err != nil {
				broken = append(broken, fmt.Sprintf("%q → %q: %v\n in %x\nout %x", c.sel, c.act, err, in, run.DataOut))
			}
		}
	}
	for i, b := range broken {
		if i == 5 {
			break
		}
		t.Error(b)
	}
	if changed == 0 {
		t.Error("no packet was changed: the property was never exercised")
	}
	lost := "nothing"
	if len(broken) > 0 {
		lost = fmt.Sprintf("%d packets broken: %s", len(broken), strings.SplitN(broken[0], "\n", 2)[0])
	}
	command := "go test ./internal/datapath -run TestRandomTruncatedPackets"
	if reliability.Soak() {
		command = "make soak"
	}
	if err := reliability.Write(reliability.Record{Case: "bpf-random-truncated", Fault: fmt.Sprintf("random TCP options, truncated frames and lying length fields through %d chain programs (BPF_PROG_TEST_RUN)", len(chains)),
		Tried: tried, Survived: tried - len(broken), Lost: lost, Soak: reliability.Soak(), Command: command, At: time.Now().UTC(), Seconds: time.Since(start).Seconds(),
		Measured: map[string]any{"changed_valid": changed, "dropped_by_drop_actor": dropped, "malformed": malformed, "malformed_passed_unchanged": untouchedMalformed, "too_short_for_test_run": refused}}); err != nil {
		t.Error(err)
	}
}

// ipFrame is a frame without what follows its IP packet (Ethernet
// padding: a frame may be longer than the packet it carries).
func ipFrame(b []byte) []byte {
	if len(b) < 14+40 {
		return b
	}
	n, least := 0, 0
	switch {
	case b[12] == 0x08 && b[13] == 0x00:
		n, least = 14+(int(b[16])<<8|int(b[17])), 14+20+20
	case b[12] == 0x86 && b[13] == 0xdd:
		n, least = 14+40+(int(b[18])<<8|int(b[19])), 14+40+20
	}
	if n >= least && n < len(b) {
		return b[:n]
	}
	return b
}
