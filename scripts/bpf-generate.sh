#!/usr/bin/env bash
# make build's BPF step. The compiled BPF objects (*_bpfel.o) are
# committed with their sources, so a checkout builds without clang:
# - clang, llvm-strip, bpftool and the libbpf headers installed (make deps
#   installs them): go generate ./..., as ever, so that objects follow
#   their sources while one works on them;
# - otherwise: the committed objects are used, unless a BPF source
#   (*.bpf.c, *.h) differs from the last commit while its object does not,
#   which only clang can fix: then it stops and says so.
set -euo pipefail
cd "$(dirname "$0")/.."

have() { command -v "$1" >/dev/null 2>&1; }
if have clang && have llvm-strip && have bpftool && [[ -e /usr/include/bpf/bpf_helpers.h ]]; then
	exec go generate ./...
fi

# Directories with BPF programs: their gen.go runs bpf2go.
stale=()
while IFS= read -r gen; do
	dir=$(dirname "$gen")
	[[ -d $dir/bpf ]] || continue
	if have git && git rev-parse --git-dir >/dev/null 2>&1; then
		changed=$(git status --porcelain -uall -- "$dir/bpf" 2>/dev/null | grep -E '\.(bpf\.c|h)$' | grep -v vmlinux.h || true)
		objs=$(git status --porcelain -- "$dir"/*_bpfel.o 2>/dev/null || true)
		if [[ -n $changed && -z $objs ]]; then
			stale+=("$dir: $(echo "$changed" | awk '{print $2}' | xargs)")
		fi
	fi
done < <(grep -rl --include=gen.go 'go tool bpf2go' internal cmd 2>/dev/null || true)

if ((${#stale[@]})); then
	echo "bpf: these BPF sources changed since the last commit and their objects were not rebuilt:" >&2
	printf '  %s\n' "${stale[@]}" >&2
	echo "bpf: building them needs clang, llvm and bpftool (make deps installs them, as root)" >&2
	exit 1
fi
echo "bpf: clang/bpftool not installed: using the committed BPF objects (make generate rebuilds them)"
