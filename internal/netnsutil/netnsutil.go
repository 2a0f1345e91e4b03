// Package netnsutil runs work inside named network namespaces (the
// /run/netns convention of iproute2, so `ip netns exec` works on them too).
//
// Linux binds a network namespace to a thread, not a process: Do locks the
// calling goroutine to its OS thread, switches, runs fn and switches back.
// Sockets created inside fn stay in that namespace for their whole life.
package netnsutil

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"
)

// Dir is where iproute2 keeps named namespaces.
const Dir = "/run/netns"

// sharedDir makes Dir a shared mount point once per process, as iproute2's
// `ip netns add` does: a namespace bound under a Dir that is not one would
// be hidden by the first `ip netns add` after it (which binds Dir onto
// itself), and could then be neither listed nor deleted.
var sharedDir = sync.OnceValue(func() error {
	if err := os.MkdirAll(Dir, 0o755); err != nil {
		return err
	}
	err := unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
	if errors.Is(err, unix.EINVAL) { // not a mount point yet
		if err = unix.Mount(Dir, Dir, "none", unix.MS_BIND|unix.MS_REC, ""); err == nil {
			err = unix.Mount("", Dir, "none", unix.MS_SHARED|unix.MS_REC, "")
		}
	}
	if err != nil {
		return fmt.Errorf("make %s a shared mount point (as ip netns add does): %w", Dir, err)
	}
	return nil
})

// Create makes a new named namespace. It fails if the name exists.
func Create(name string) error {
	if Exists(name) {
		return fmt.Errorf("network namespace %q already exists", name)
	}
	if err := sharedDir(); err != nil {
		return err
	}
	// netns.NewNamed moves the calling thread into the new namespace: it
	// runs on a thread of its own that is never unlocked, so the runtime
	// ends that thread with the goroutine and no other goroutine ever runs
	// in the new namespace by accident.
	// The new namespace is made from the caller's (which may be another
	// namespace: Do(parent, Create) makes a child of parent).
	from, err := netns.Get()
	if err != nil {
		return err
	}
	defer from.Close()
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := netns.Set(from); err != nil {
			errc <- fmt.Errorf("create network namespace %q: %w", name, err)
			return
		}
		h, err := netns.NewNamed(name)
		if err != nil {
			errc <- fmt.Errorf("create network namespace %q: %w", name, err)
			return
		}
		h.Close()
		errc <- nil
	}()
	if err := <-errc; err != nil {
		return err
	}
	// Loopback is down in a new namespace; almost everything wants it up.
	return Do(name, func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		return netlink.LinkSetUp(lo)
	})
}

// Exists reports whether a named namespace exists.
func Exists(name string) bool {
	_, err := os.Stat(filepath.Join(Dir, name))
	return err == nil
}

// Delete removes a named namespace (a no-op if it is gone).
func Delete(name string) error {
	if !Exists(name) {
		return nil
	}
	if err := netns.DeleteNamed(name); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("delete network namespace %q: %w", name, err)
	}
	return nil
}

// List returns named namespaces whose names start with prefix.
func List(prefix string) ([]string, error) {
	ents, err := os.ReadDir(Dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), prefix) {
			out = append(out, e.Name())
		}
	}
	return out, nil
}

// Open returns a handle (file descriptor) for a named namespace.
func Open(name string) (netns.NsHandle, error) {
	h, err := netns.GetFromName(name)
	if err != nil {
		return h, fmt.Errorf("open network namespace %q: %w", name, err)
	}
	return h, nil
}

// Do runs fn inside namespace name, on a thread locked to it for fn's
// run (the CNI plugins' ns package: a thread that cannot be returned to
// its namespace is never reused).
func Do(name string, fn func() error) error {
	return ns.WithNetNSPath(filepath.Join(Dir, name), func(ns.NetNS) error { return fn() })
}

// Sysctl writes a per-namespace sysctl such as "net/ipv4/ip_forward".
func Sysctl(name, key, value string) error {
	return Do(name, func() error { return WriteSysctl(key, value) })
}

// WriteSysctl writes a sysctl in the calling thread's namespace.
func WriteSysctl(key, value string) error {
	p := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	if err := os.WriteFile(p, []byte(value), 0o644); err != nil {
		return fmt.Errorf("sysctl %s=%s: %w", key, value, err)
	}
	return nil
}

// ReadSysctl reads a sysctl in the calling thread's namespace.
func ReadSysctl(key string) (string, error) {
	p := filepath.Join("/proc/sys", strings.ReplaceAll(key, ".", "/"))
	b, err := os.ReadFile(p)
	return strings.TrimSpace(string(b)), err
}

// Netlink returns an rtnetlink handle bound to the namespace.
func Netlink(name string) (*netlink.Handle, error) {
	h, err := Open(name)
	if err != nil {
		return nil, err
	}
	defer h.Close()
	nh, err := netlink.NewHandleAt(h)
	if err != nil {
		return nil, fmt.Errorf("netlink handle in %q: %w", name, err)
	}
	return nh, nil
}

// PIDs lists processes whose network namespace is name, the same way
// `ip netns pids` does: by comparing /proc/PID/ns/net with the bind mount.
func PIDs(name string) ([]int, error) {
	var want unix.Stat_t
	if err := unix.Stat(filepath.Join(Dir, name), &want); err != nil {
		return nil, err
	}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range ents {
		var pid int
		if _, err := fmt.Sscanf(e.Name(), "%d", &pid); err != nil || pid <= 0 {
			continue
		}
		var st unix.Stat_t
		if unix.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &st) != nil {
			continue
		}
		if st.Dev == want.Dev && st.Ino == want.Ino {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// SetPathManager selects the MPTCP path manager ("kernel" or "userspace")
// of a named namespace on any kernel: net.mptcp.path_manager where it
// exists (Linux 6.15 on), otherwise net.mptcp.pm_type (0 kernel, 1
// userspace; Linux 5.19 on).
func SetPathManager(name, pm string) error {
	return Do(name, func() error { return WritePathManager(pm) })
}

// WritePathManager is SetPathManager in the calling thread's namespace.
func WritePathManager(pm string) error {
	var typ string
	switch pm {
	case "kernel":
		typ = "0"
	case "userspace":
		typ = "1"
	default:
		return fmt.Errorf("path manager %q: want kernel or userspace", pm)
	}
	err := WriteSysctl("net.mptcp.path_manager", pm)
	if err == nil || !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := WriteSysctl("net.mptcp.pm_type", typ); err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("this kernel has neither net.mptcp.path_manager (Linux 6.15) nor net.mptcp.pm_type (Linux 5.19): no userspace path manager")
		}
		return err
	}
	return nil
}

// UserspacePMSetting is the sysctl setting that selects the userspace
// path manager on the running kernel, as a user would write it:
// net.mptcp.path_manager=userspace (Linux 6.15 on), else
// net.mptcp.pm_type=1 (Linux 5.19 on, said as such).
func UserspacePMSetting() string {
	if _, err := ReadSysctl("net.mptcp.path_manager"); err == nil {
		return "net.mptcp.path_manager=userspace"
	}
	if _, err := ReadSysctl("net.mptcp.pm_type"); err == nil {
		return "net.mptcp.pm_type=1 (this kernel has no net.mptcp.path_manager, which arrived in Linux 6.15)"
	}
	return "net.mptcp.pm_type=1 (Linux 5.19 on; this kernel has neither it nor net.mptcp.path_manager)"
}

// ReadPathManager says which path manager runs the calling thread's
// namespace ("kernel" or "userspace"), from whichever sysctl the kernel has.
func ReadPathManager() (string, error) {
	if v, err := ReadSysctl("net.mptcp.path_manager"); err == nil {
		return v, nil
	}
	v, err := ReadSysctl("net.mptcp.pm_type")
	if err != nil {
		return "", fmt.Errorf("neither net.mptcp.path_manager nor net.mptcp.pm_type: %w", err)
	}
	if v == "1" {
		return "userspace", nil
	}
	return "kernel", nil
}
