package daemon

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"mpsteer/internal/observe"
	"mpsteer/internal/policy"
)

// A cgroup id resolves to its path when it lies at or below a scope, and
// to nothing elsewhere; a cgroup made after the last look is found on a
// later one. (A directory tree stands in for the cgroup hierarchy: ids
// are inode numbers either way.)
func TestAppScopeResolvesCgroupsUnderScopes(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"system.slice/video.service/worker", "system.slice/other.service", "user.slice"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	ino := func(p string) uint64 {
		var st syscall.Stat_t
		if err := syscall.Stat(filepath.Join(root, p), &st); err != nil {
			t.Fatal(err)
		}
		return st.Ino
	}
	a := newAppScope()
	a.root = root
	scopes := []string{"/system.slice/video.service"}
	now := time.Unix(100, 0)
	for p, want := range map[string]string{
		"system.slice/video.service":        "/system.slice/video.service",
		"system.slice/video.service/worker": "/system.slice/video.service/worker",
		"system.slice/other.service":        "",
		"user.slice":                        "",
	} {
		now = now.Add(time.Second)
		if got := a.resolve(ino(p), scopes, now); got != want {
			t.Errorf("%s: %q, want %q", p, got, want)
		}
	}
	if got := a.resolve(0, scopes, now); got != "" {
		t.Errorf("id 0: %q", got)
	}
	// Made later, under the scope: found once a second has passed.
	if err := os.Mkdir(filepath.Join(root, "system.slice/video.service/late"), 0o755); err != nil {
		t.Fatal(err)
	}
	late := ino("system.slice/video.service/late")
	now = now.Add(time.Second)
	if got := a.resolve(late, scopes, now); got != "/system.slice/video.service/late" {
		t.Errorf("a cgroup made later: %q", got)
	}

	// In a snapshot: the connection's cgroup comes from the MPTCP socket,
	// else from its subflows.
	d := &Daemon{scope: a}
	c := &policy.Conn{Token: 7, Subflows: []observe.Subflow{{Token: 7, CgroupID: ino("system.slice/video.service/worker")}}}
	d.cgroupOf(c, nil, scopes, now.Add(time.Second))
	if c.Cgroup != "/system.slice/video.service/worker" {
		t.Errorf("from the subflows: %+v", c)
	}
	c = &policy.Conn{Token: 8}
	d.cgroupOf(c, map[uint32]observe.Conn{8: {Token: 8, CgroupID: ino("user.slice")}}, scopes, now.Add(2*time.Second))
	if c.Cgroup != "" || c.CgroupID != ino("user.slice") {
		t.Errorf("outside the scope: %+v", c)
	}
}
