// Package mptcpize switches unmodified applications in chosen cgroups to
// MPTCP, with no LD_PRELOAD: an fmod_ret BPF program on the kernel's
// update_socket_protocol hook (Linux 6.6 and later) turns their TCP
// stream sockets into MPTCP sockets when they are made. The C source is in
// bpf/, compiled by clang through bpf2go; the compiled object is committed,
// so building needs no clang.
package mptcpize

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// program is CO-RE, so its object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel mptcpize bpf/mptcpize.bpf.c -- -I./bpf
