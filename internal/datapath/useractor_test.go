package datapath_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/datapath"
	dt "mpsteer/internal/datapath/datapathtest"
	"mpsteer/internal/testutil"
)

func TestUserActorFromTheTemplate(t *testing.T) {
	h := dt.NewHarness(t)
	testutil.RequireTool(t, "clang")
	obj := filepath.Join(t.TempDir(), "stamp.o")
	out, err := exec.Command("clang", "-O2", "-g", "-target", "bpf", "-I", "bpf", "-c", "bpf/template/stamp.bpf.c", "-o", obj).CombinedOutput()
	if err != nil {
		t.Fatalf("compile the template: %v\n%s", err, out)
	}
	if err := h.M.LoadActor(obj, "stamp"); err != nil {
		t.Fatal(err)
	}
	_, r := h.Chain("type(data-ack)", "stamp(0x2a) count")
	in := dt.Build(t, dt.ACKPkt(false, dt.V4A, dt.V4B, dt.DSSAck))
	if got := r(in); got.Mark != 0x2a || got.Selected != 1 {
		t.Fatalf("user actor: mark %#x selected %d", got.Mark, got.Selected)
	}
	// Names are checked; a second load under the same name is refused.
	if err := h.M.LoadActor(obj, "stamp"); err == nil || !strings.Contains(err.Error(), "loaded already") {
		t.Fatalf("second load: %v", err)
	}
	if err := h.M.LoadActor(obj, "drop"); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("shadowing a built-in: %v", err)
	}
	if _, err := datapath.Compile("", "stamp(1, nine)", map[string]bool{"stamp": true}); err == nil || !strings.Contains(err.Error(), "whole numbers") {
		t.Fatalf("bad argument: %v", err)
	}
}
