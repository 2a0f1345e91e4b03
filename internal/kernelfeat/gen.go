package kernelfeat

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// program is CO-RE, so its object runs on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel sockopt bpf/sockopt.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -no-global-types -target bpfel probecc bpf/cc.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel rdonly bpf/rdonly.bpf.c -- -I./bpf
