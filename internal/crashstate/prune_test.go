package crashstate

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

// A state file of a namespace that no longer exists is removed; one of a
// live namespace, the daemon's own and one without the inode stay.
func TestPruneStateFilesOfNamespacesThatAreGone(t *testing.T) {
	if ownNetnsInode() == 0 {
		t.Skip("no /proc/self/ns/net")
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := write("daemon-netns-1.json", `{"netns_inode": 1}`)
	write("daemon-netns-2.json", `{"owned_endpoints": {"10.1.0.1": 3}, "netns_inode": `+itoa(ownNetnsInode())+`}`)
	write("daemon-netns-3.json", `{"owned_endpoints": {"10.1.0.1": 3}, "netns_inode": 1}`) // inode 1 is no namespace
	write("daemon-netns-4.json", `{"owned_endpoints": {"10.1.0.1": 3}}`)
	removed := Prune(dir, own)
	if len(removed) != 1 || removed[0] != "daemon-netns-3.json" {
		t.Fatalf("removed %v, want [daemon-netns-3.json]", removed)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*.json"))
	if len(left) != 3 {
		t.Fatalf("left %v", left)
	}
}

func itoa(v uint64) string { return strconv.FormatUint(v, 10) }
