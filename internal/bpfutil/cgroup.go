package bpfutil

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"
)

// Cgroup2Root finds where the unified cgroup hierarchy is mounted, and
// mounts it under /run/mpsteer when nothing has (sockops programs attach to
// a cgroup v2).
func Cgroup2Root() (string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// mountinfo: … mount-point … - fstype source options
		fields := strings.Fields(sc.Text())
		for i, fld := range fields {
			if fld == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" {
				return fields[4], nil
			}
		}
	}
	dir := "/run/mpsteer/cgroup2"
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	if err := unix.Mount("none", dir, "cgroup2", 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
		return "", fmt.Errorf("no cgroup v2 hierarchy is mounted and mounting one at %s failed: %w", dir, err)
	}
	return dir, nil
}

// NetNSCookie returns the cookie of the calling thread's network namespace
// (the kernel's stable identity of a namespace, as BPF sees it).
func NetNSCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	v, err := unix.GetsockoptUint64(fd, unix.SOL_SOCKET, unix.SO_NETNS_COOKIE)
	if err != nil {
		return 0, fmt.Errorf("SO_NETNS_COOKIE: %w", err)
	}
	return v, nil
}

// AttachSockOps attaches a sockops program to the root of the cgroup v2
// hierarchy, where it sees every TCP socket of the host (programs filter
// by network namespace cookie themselves).
func AttachSockOps(prog *ebpf.Program, what string) (link.Link, error) {
	root, err := Cgroup2Root()
	if err != nil {
		return nil, err
	}
	l, err := link.AttachCgroup(link.CgroupOptions{Path: root, Attach: ebpf.AttachCGroupSockOps, Program: prog})
	if err != nil {
		return nil, fmt.Errorf("attach the sockops %s program to %s: %w", what, root, err)
	}
	return l, nil
}
