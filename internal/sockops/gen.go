// Package sockops holds mpsteer's cgroup sockops programs and their
// loaders: per-socket levers and inputs, apart from the TC chains of
// internal/datapath. rto caps a subflow's retransmission timeout (and
// rtoexisting gives subflows established before what it gives new ones),
// rate its pacing rate, and health writes and reads the receiver's
// path-health reports (RAMPTCP) in a TCP option. The C sources are in bpf/, compiled
// by clang through bpf2go; the compiled objects are committed, so building
// needs no clang.
package sockops

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// programs are CO-RE, so their objects run on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel rto bpf/rto.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel rtoexisting bpf/rtoexisting.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel rate bpf/rate.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -no-global-types -target bpfel ratenow bpf/ratenow.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -no-global-types -target bpfel capcc bpf/capcc.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel initial bpf/initial.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel health bpf/health.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -target bpfel healthtest bpf/healthtest.bpf.c -- -I./bpf
