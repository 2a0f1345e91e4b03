// Package corepin pins TCP flows to core links in the lab: a BPF program
// at TCX ingress of the core routers gives every new TCP flow the next
// live link of its (client address, server address) pair, round-robin, and
// marks the flow's packets in both directions so that policy routing takes
// that link. It is what the M-fullmesh poster's SDN controller does, where
// the lab's routers would otherwise spread flows by ECMP hash.
//
// The C source is compiled by clang through bpf2go; the compiled object is
// committed, so building needs no clang.
package corepin

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// program is CO-RE, so its object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel corepin bpf/corepin.bpf.c -- -I./bpf
