// Package subflowiter samples a namespace's MPTCP subflows with a BPF
// iterator over its TCP sockets (iter/tcp): one fixed-size record per
// subflow with the values inet_diag would give (tcp_info, congestion
// control, cgroup, the MPTCP subflow info), without building and parsing
// netlink attributes per socket or taking each socket's lock. At thousands
// of subflows it costs a fraction of a sock_diag dump; observe.Sampler
// stays the fallback where the iterator cannot load.
package subflowiter

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// program is CO-RE, so its object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel subflows bpf/subflows.bpf.c -- -I./bpf
