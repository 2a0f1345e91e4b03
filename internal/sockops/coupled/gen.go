package coupled

// vmlinux.h comes from the running kernel's BTF and is not committed; the
// programs are CO-RE, so their objects run on other kernels too.
//go:generate sh -c "test -s bpf/vmlinux.h || bpftool btf dump file /sys/kernel/btf/vmlinux format c > bpf/vmlinux.h"
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -type coupled_conn -target bpfel lia bpf/lia.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -no-global-types -target bpfel balia bpf/balia.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror" -target bpfel selector bpf/select.bpf.c -- -I./bpf
//go:generate go tool bpf2go -cc clang -cflags "-O2 -g -Wall -Werror -mcpu=v3" -type mathtest_in -type mathtest_out -target bpfel mathtest bpf/mathtest.bpf.c -- -I./bpf
