package datapath_test

import (
	"fmt"
	"testing"

	"github.com/cilium/ebpf"
	"golang.org/x/sys/unix"

	"mpsteer/internal/datapath"
	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/testutil"
)

// With a pin directory, what a chain withheld and its counters outlive the
// manager (a daemon restart), and deleting the chain forgets them.
func TestPinnedStateOutlivesTheManager(t *testing.T) {
	testutil.RequireRoot(t, "bpffs and BPF programs")
	dir := t.TempDir()
	if err := unix.Mount("bpf", dir, "bpf", 0, "mode=0700"); err != nil {
		testutil.Unavailable(t, fmt.Sprintf("cannot mount a bpffs: %v", err))
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	open := func() *datapath.Manager {
		t.Helper()
		m, err := datapath.NewManagerWith(datapath.Options{PinDir: dir + "/state"})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	frame := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.Nop, dt.Nop, dt.TSOpt, dt.DSSAck, dt.AddAddr4))
	run := func(m *datapath.Manager) (uint32, *datapath.ChainStatus) {
		t.Helper()
		id, prog, err := m.AddDetached("type(add-addr)", "strip_add_addr")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := prog.Run(&ebpf.RunOptions{Data: frame}); err != nil {
			t.Fatal(err)
		}
		st, _ := m.Status(id)
		return id, st
	}

	m := open()
	id, st := run(m)
	if len(st.Withheld) != 1 || st.Seen != 1 {
		t.Fatalf("first manager: seen %d, withheld %+v", st.Seen, st.Withheld)
	}
	m.Close()

	m = open()
	id2, st := run(m)
	if id2 != id || len(st.Withheld) != 1 || st.Seen != 2 {
		t.Fatalf("after a restart: chain %d (was %d), seen %d (want 2), withheld %+v", id2, id, st.Seen, st.Withheld)
	}
	if n, err := m.Release(id); n != 1 || err != nil {
		t.Fatalf("release after a restart: %d, %v", n, err)
	}
	m.Del(id)
	m.Close()

	m = open()
	defer m.Close()
	_, st = run(m)
	if st.Seen != 1 || len(st.Withheld) != 1 || st.Withheld[0].Released {
		t.Fatalf("a deleted chain's state came back: seen %d, withheld %+v", st.Seen, st.Withheld)
	}
	if _, err := datapath.NewManagerWith(datapath.Options{PinDir: t.TempDir()}); err == nil {
		t.Errorf("a pin directory outside bpffs was accepted")
	}
}
