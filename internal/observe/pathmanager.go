package observe

import "mpsteer/internal/netnsutil"

// Path managers, as PathManager names them.
const (
	KernelPM    = "kernel"
	UserspacePM = "userspace"
)

// PathManager reads which path manager runs the calling thread's
// namespace's MPTCP connections: "userspace" (a daemon opens and closes
// subflows and announces addresses) or "kernel" (the kernel does, from its
// endpoints). Kernels before 6.15 name it net.mptcp.pm_type (1:
// userspace); later ones net.mptcp.path_manager.
func PathManager() string {
	if v, err := netnsutil.ReadSysctl("net.mptcp.path_manager"); err == nil {
		if v == "userspace" {
			return UserspacePM
		}
		return KernelPM
	}
	if v, err := netnsutil.ReadSysctl("net.mptcp.pm_type"); err == nil && v == "1" {
		return UserspacePM
	}
	return KernelPM
}

// TCP states a subflow shows (include/net/tcp_states.h).
const (
	TCPEstablished = 1
	TCPSynSent     = 2
	TCPSynRecv     = 3
)
