// SPDX-License-Identifier: GPL-2.0
// For the tests only: runs window.h's arithmetic (the very functions the
// coupled congestion controls call) on a connection's slots written into
// mathtest_in, under BPF_PROG_TEST_RUN, and writes what they computed into
// mathtest_out, for model_bpf_test.go to compare with model.go.
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>

#include "window.h"

struct mathtest_in {
	struct coupled_conn conn;
	__u64 now;
	__u32 self;
	__u32 cwnd;
	__u32 alpha; /* for balia_decrease */
	__u32 pad;
};

struct mathtest_out {
	__u32 lia;
	__u32 balia;
	__u32 balia_alpha;
	__u32 balia_decrease;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mathtest_in);
} mathtest_input SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct mathtest_out);
} mathtest_output SEC(".maps");

SEC("syscall")
int mathtest(void *ctx)
{
	__u32 zero = 0;
	struct mathtest_in *in = bpf_map_lookup_elem(&mathtest_input, &zero);
	struct mathtest_out *out = bpf_map_lookup_elem(&mathtest_output, &zero);
	if (!in || !out)
		return 1;
	__u32 self = in->self & (MAX_SUBFLOWS - 1);
	__u32 alpha = 0;
	out->lia = lia_window(&in->conn, self, in->cwnd, in->now);
	out->balia = balia_window(&in->conn, self, in->cwnd, in->now, &alpha);
	out->balia_alpha = alpha;
	out->balia_decrease = balia_decrease(in->cwnd, in->alpha);
	return 0;
}

char LICENSE[] SEC("license") = "GPL";
