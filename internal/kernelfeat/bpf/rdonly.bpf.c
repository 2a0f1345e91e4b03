// SPDX-License-Identifier: GPL-2.0
// Calls the bpf_rdonly_cast kfunc, as the datapath chains' programs do to
// read a subflow's MPTCP context: it loads where the kernel has it.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>

extern void *bpf_rdonly_cast(const void *obj, __u32 btf_id) __ksym;

SEC("tc")
int probe_rdonly_cast(struct __sk_buff *skb)
{
	struct mptcp_subflow_context *ctx = bpf_rdonly_cast(0, bpf_core_type_id_kernel(struct mptcp_subflow_context));
	return ctx ? -1 : 0;
}

char _license[] SEC("license") = "GPL";
