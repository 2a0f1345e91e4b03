// Package spread is the datapath of the daemon's spread policy: a BPF
// program at TCX ingress of a hypervisor's VM-facing devices that gives
// every new TCP flow of an MPTCP connection (a SYN with MP_CAPABLE or
// MP_JOIN) the next uplink, round-robin per (VM address, remote address)
// pair, remembers it per 5-tuple and marks the flow's packets so that
// policy routing (fwmark → one table per uplink) sends them out of that
// uplink. A second program at TCX ingress of the uplinks remembers the
// uplink a flow started by a remote host came in on, so that the VM's
// replies leave by the same link.
//
// The C source is compiled by clang through bpf2go; the compiled object is
// committed, so building needs no clang. It is its own package (not a
// line in ../gen.go) so that generating it never regenerates the chains.
package spread

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// program is CO-RE, so its object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel spread bpf/spread.bpf.c -- -I./bpf
