// SPDX-License-Identifier: GPL-2.0
// Switches unmodified applications to MPTCP: the kernel asks
// update_socket_protocol() which protocol a new socket gets (an fmod_ret
// hook since Linux 6.6), and this program answers IPPROTO_MPTCP for a TCP
// stream socket (IPPROTO_TCP or 0, IPv4 or IPv6) when the calling task's
// cgroup, or one of its ancestors, is in the scopes map and the socket is
// made in the daemon's network namespace. Every other socket keeps the
// protocol it asked for: the program answers 0, "no opinion", and the
// kernel's own update_socket_protocol() answers. (An fmod_ret program's
// non-zero answer is final: the programs attached after it do not run, so
// answering the socket's own protocol, IPPROTO_TCP for curl's, would keep
// the daemon of another namespace on the host from switching it.)
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_TYPE_MASK 0xf
#define IPPROTO_TCP 6
#define IPPROTO_MPTCP 262
// Deeper than any real hierarchy (systemd's: a handful of levels).
#define MAX_LEVELS 32

// cgroup v2 ids (the inode numbers of the cgroups' directories) whose
// processes, and those of every cgroup below, get MPTCP.
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u64);
	__type(value, __u32);
} scopes SEC(".maps");

enum { STAT_STREAM, STAT_SWITCHED, STAT_MAX };

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, STAT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} mptcpize_stats SEC(".maps");

// Set by the loader: only sockets made in this network namespace.
volatile const __u64 netns_cookie = 0;

static __always_inline void count(__u32 i)
{
	__u64 *v = bpf_map_lookup_elem(&mptcpize_stats, &i);
	if (v)
		__sync_fetch_and_add(v, 1);
}

static __always_inline int in_scope(void)
{
	for (int level = 0; level < MAX_LEVELS; level++) {
		__u64 id = bpf_get_current_ancestor_cgroup_id(level);
		if (!id)
			return 0; // above the task's own cgroup
		if (bpf_map_lookup_elem(&scopes, &id))
			return 1;
	}
	return 0;
}

SEC("fmod_ret/update_socket_protocol")
int BPF_PROG(mpsteer_mptcpize, int family, int type, int protocol)
{
	if (family != AF_INET && family != AF_INET6)
		return 0;
	// type still carries SOCK_NONBLOCK and SOCK_CLOEXEC here.
	if ((type & SOCK_TYPE_MASK) != SOCK_STREAM || (protocol != 0 && protocol != IPPROTO_TCP))
		return 0;
	if (netns_cookie) {
		struct task_struct *task = bpf_get_current_task_btf();
		if (BPF_CORE_READ(task, nsproxy, net_ns, net_cookie) != netns_cookie)
			return 0;
	}
	count(STAT_STREAM);
	if (!in_scope())
		return 0;
	count(STAT_SWITCHED);
	return IPPROTO_MPTCP;
}

char _license[] SEC("license") = "GPL";
