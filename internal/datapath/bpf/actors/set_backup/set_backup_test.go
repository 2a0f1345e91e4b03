package set_backup_test

import (
	"bytes"
	"fmt"
	"net"
	"testing"

	"github.com/gopacket/gopacket/layers"

	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/lab/traffic"
	"mpsteer/internal/netnsutil"
	"mpsteer/internal/testutil"
)

// set_backup and clear_backup add MP_PRIO to an ACK (tail growth or room
// made for it), with every length and checksum right, or skip a packet
// without room.
func TestSetBackupInsertsMPPrio(t *testing.T) {
	dt.Kfuncs(t, testSetBackupInserts)
}

func testSetBackupInserts(t *testing.T, h *dt.Harness) {
	_, set := h.Chain("type(data-ack) or type(data)", "set_backup(force)")
	_, clr := h.Chain("", "clear_backup(force)")
	dt.Both(func(t *testing.T, v6 bool, a, b string) {
		for _, l := range dt.Layouts {
			for _, payload := range [][]byte{nil, []byte("some payload bytes")} {
				p := dt.ACKPkt(v6, a, b, append(append([]layers.TCPOption{}, l.Pre...), dt.DSSAck)...)
				p.Payload = payload
				in := dt.Build(t, p)
				want := p
				want.Opts = append(append([]layers.TCPOption{}, p.Opts...), dt.Nop,
					layers.TCPOption{OptionType: 30, OptionLength: 3, OptionData: []byte{0x51}})
				exp := dt.Build(t, want)
				got := set(in)
				if got.Ret != dt.TCXNext || got.Modified != 1 {
					t.Errorf("%s payload=%d: ret %d modified %d", l.Name, len(payload), got.Ret, got.Modified)
				}
				if err := dt.Validate(got.Out); err != nil {
					t.Errorf("%s payload=%d: output is not valid: %v", l.Name, len(payload), err)
				}
				if !bytes.Equal(got.Out, exp) {
					t.Errorf("%s payload=%d:\n got %x\nwant %x", l.Name, len(payload), got.Out, exp)
				}
				// clear_backup writes B=0.
				exp[len(exp)-len(payload)-1] = 0x50
				dt.FixChecksums(t, exp)
				if got := clr(in); !bytes.Equal(got.Out, exp) {
					t.Errorf("%s payload=%d: clear_backup\n got %x\nwant %x", l.Name, len(payload), got.Out, exp)
				}
			}
		}
		// No room: 40 bytes of options already.
		full := dt.ACKPkt(v6, a, b, dt.Nop, dt.Nop, dt.TSOpt, dt.Nop, dt.Nop, dt.SACK, dt.MPTCP(2, 0x01, 0, 0, 0, 1), dt.Nop, dt.Nop, dt.Nop, dt.Nop, dt.Nop, dt.Nop, dt.Nop, dt.Nop)
		in := dt.Build(t, full)
		if got := set(in); !bytes.Equal(got.Out, in) || got.Skipped != 1 {
			t.Errorf("full header: skipped %d, changed=%v", got.Skipped, !bytes.Equal(got.Out, in))
		}
	})(t)
	// Without force, a packet no local subflow owns is left alone.
	_, plain := h.Chain("", "set_backup")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	if got := plain(in); !bytes.Equal(got.Out, in) || got.Skipped != 1 {
		t.Errorf("no socket: skipped %d, changed=%v", got.Skipped, !bytes.Equal(got.Out, in))
	}
}

// Without force, set_backup and clear_backup act on what the subflow's
// socket says: on a fresh MPTCP subflow (not backup) an ACK for it gets
// MP_PRIO from set_backup and nothing from clear_backup, which has
// nothing to change (not skipped: the flag was read). With the kfuncs of
// 6.2 (the subflow's context read through bpf_rdonly_cast) and without
// (bpf_probe_read_kernel).
func TestSetBackupReadsTheSubflowsFlag(t *testing.T) {
	dt.Kfuncs(t, func(t *testing.T, h *dt.Harness) {
		ns := testutil.Netns(t, "mpst-backup")
		_, set := h.Chain("", "set_backup")
		_, clr := h.Chain("", "clear_backup")
		err := netnsutil.Do(ns, func() error {
			c, _, closeAll, err := traffic.LocalPair("tcp4", "127.0.0.1:0", true)
			if err != nil {
				return err
			}
			defer closeAll()
			cli, srv := c.LocalAddr().(*net.TCPAddr), c.RemoteAddr().(*net.TCPAddr)
			// An ACK from the server to the client's subflow.
			p := dt.Pkt{Src: srv.IP.String(), Dst: cli.IP.String(), Sport: uint16(srv.Port), Dport: uint16(cli.Port),
				Seq: 1000, Ack: 2000, ACK: true, Window: 512, Opts: []layers.TCPOption{dt.Nop, dt.Nop, dt.TSOpt, dt.DSSAck}}
			in := dt.Build(t, p)
			if got := clr(in); !bytes.Equal(got.Out, in) || got.Skipped != 0 || got.Modified != 0 {
				return fmt.Errorf("clear_backup on a subflow that is not backup: modified %d, skipped %d (skipped: its flag was not read)", got.Modified, got.Skipped)
			}
			if got := set(in); got.Modified != 1 || dt.Validate(got.Out) != nil {
				return fmt.Errorf("set_backup on a subflow that is not backup: modified %d, skipped %d", got.Modified, got.Skipped)
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	})
}
