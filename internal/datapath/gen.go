// Package datapath holds mpsteer's eBPF chains at TC (C, CO-RE, compiled by
// clang through bpf2go; the compiled objects are committed, so building
// needs no clang) and their loader. The sockops programs are in
// internal/sockops.
package datapath

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// programs are CO-RE, so their objects run on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel steps bpf/chain.bpf.c -- -I./bpf
