package datapath

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"mpsteer/internal/testutil"
)

func TestUserActorFromTheTemplate(t *testing.T) {
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
	_, r := h.chain("type(data-ack)", "stamp(0x2a) count")
	in := build(t, ack(false, v4a, v4b, dssAck))
	if got := r(in); got.mark != 0x2a || got.selected != 1 {
		t.Fatalf("user actor: mark %#x selected %d", got.mark, got.selected)
	}
	// Names are checked; a second load under the same name is refused.
	if err := h.m.LoadActor(obj, "stamp"); err == nil || !strings.Contains(err.Error(), "loaded already") {
		t.Fatalf("second load: %v", err)
	}
	if err := h.m.LoadActor(obj, "drop"); err == nil || !strings.Contains(err.Error(), "built-in") {
		t.Fatalf("shadowing a built-in: %v", err)
	}
	if _, err := Compile("", "stamp(1, nine)", map[string]bool{"stamp": true}); err == nil || !strings.Contains(err.Error(), "whole numbers") {
		t.Fatalf("bad argument: %v", err)
	}
}
