package crashstate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// A daemon killed in a namespace that was then deleted leaves its state
// file (what to undo there) behind for ever: nothing can undo anything in
// a namespace that is gone. The next daemon to start, in any namespace,
// removes such files: those whose namespace inode no process is in and
// no bind mount (/run/netns) holds.

// ownNetnsInode is the inode of the caller's network namespace (0 when
// unknown).
func ownNetnsInode() uint64 {
	var st syscall.Stat_t
	if err := syscall.Stat("/proc/self/ns/net", &st); err != nil {
		return 0
	}
	return st.Ino
}

// liveNetnsInodes lists the namespaces that exist: every process's and
// every named one's. complete is false when a daemon that is not root
// could not read some process's namespace (another user's): then nothing
// may be taken for gone. Root reads every ordinary process's; what it
// cannot read (a container's own init, say) is outside anything a daemon
// runs in.
func liveNetnsInodes() (live map[uint64]bool, complete bool) {
	live = map[uint64]bool{}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return live, false
	}
	complete = true
	for _, p := range procs {
		if _, err := strconv.Atoi(p.Name()); err != nil {
			continue
		}
		link, err := os.Readlink(filepath.Join("/proc", p.Name(), "ns", "net"))
		if err != nil {
			if !errors.Is(err, os.ErrNotExist) && os.Geteuid() != 0 { // not an exit in between
				complete = false
			}
			continue
		}
		// "net:[4026531840]"
		if i, j := strings.IndexByte(link, '['), strings.IndexByte(link, ']'); i >= 0 && j > i {
			if ino, err := strconv.ParseUint(link[i+1:j], 10, 64); err == nil {
				live[ino] = true
			}
		}
	}
	for _, dir := range []string{"/run/netns", "/var/run/netns"} {
		names, _ := os.ReadDir(dir)
		for _, n := range names {
			var st syscall.Stat_t
			if syscall.Stat(filepath.Join(dir, n.Name()), &st) == nil {
				live[st.Ino] = true
			}
		}
	}
	return live, complete
}

// Prune removes the state files in dir (other than own) of
// namespaces that are gone, and returns their names. Files written before
// the namespace inode was recorded are left alone, and all of them when
// the daemon cannot see every process's namespace.
func Prune(dir, own string) []string {
	paths, _ := filepath.Glob(filepath.Join(dir, "daemon-netns-*.json"))
	var live map[uint64]bool
	complete := false
	var removed []string
	for _, p := range paths {
		if p == own {
			continue
		}
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		var s struct {
			NetnsInode uint64 `json:"netns_inode"`
		}
		if json.Unmarshal(b, &s) != nil || s.NetnsInode == 0 {
			continue
		}
		if live == nil {
			live, complete = liveNetnsInodes()
		}
		if !complete {
			return nil
		}
		if !live[s.NetnsInode] && os.Remove(p) == nil {
			removed = append(removed, filepath.Base(p))
		}
	}
	return removed
}
