// Package helpercost times single kernel helpers the way the datapath's
// actors call them (finding a socket, growing a packet, storing bytes,
// fixing a checksum, a hash lookup), for the datapath benchmark: an
// actor that needs a helper can cost no less than it.
//
// The C source is compiled by clang through bpf2go; the compiled object is
// committed, so building needs no clang.
package helpercost

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// programs are CO-RE, so their object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel helpercost bpf/helpercost.bpf.c -- -I./bpf
