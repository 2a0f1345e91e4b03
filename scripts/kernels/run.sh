#!/usr/bin/env bash
# make test-kernels: the privileged functional tests (tests.txt) on each
# kernel of the matrix. The Debian kernels (fetch.sh: Debian 12's 6.1, the
# bookworm backports' 6.12 and Debian 13's, downloaded once into
# MPSTEER_KERNEL_CACHE) boot with virtme-ng under qemu in software
# emulation (TCG: this machine's /dev/kvm runs no stock kernel), sharing
# the host's root file system read-only, and run guest.sh; the host's own
# kernel runs guest.sh natively. Per kernel: one line
# "kernel VERSION: N passed, M failed, K skipped" and
# results/kernels/VERSION.json. Exits 0 only when every kernel passes.
# MPSTEER_KERNELS=debian12,host runs a part of the matrix (debian13 is run
# by default only when its kernel line differs from the backports one);
# MPSTEER_KERNEL_TESTS names another list of tests;
# MPSTEER_KERNEL_TIMEOUT bounds each kernel's run (default 12 minutes).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
kernels=${MPSTEER_KERNELS:-}
per_kernel=${MPSTEER_KERNEL_TIMEOUT:-720}
# Software emulation runs everything several times slower: the waits for
# a daemon or an emulator to start are stretched by this much there.
scale=${MPSTEER_VM_TIME_SCALE:-6}
out=${MPSTEER_KERNEL_RESULTS:-$root/results/kernels}
build=$root/build/kernels
tests=$(realpath "${MPSTEER_KERNEL_TESTS:-scripts/kernels/tests.txt}")
venv=$root/.cache/venv

[[ $(id -u) -eq 0 ]] || { echo "test-kernels: needs root (the tests build namespaces and load BPF programs)" >&2; exit 1; }
[[ -x $venv/bin/vng ]] || { echo "test-kernels: virtme-ng is missing: make deps installs it in $venv" >&2; exit 1; }
export PATH=$venv/bin:$PATH

# The test binaries, built once on the host (the guests see the host's
# files: the same binaries run everywhere).
rm -rf "$build"; mkdir -p "$build/bin"
go build -o "$build/bin/mpsteer" ./cmd/mpsteer
go build -o "$build/bin/test2json" cmd/test2json
go build -o "$build/kernelmatrix" ./cmd/kernelmatrix
grep -v '^#' "$tests" | awk 'NF {print $1}' | sort -u | while read -r pkg; do
	go test -c -o "$build/bin/${pkg//\//_}.test" "./$pkg"
done

# By default the matrix is what fetch.sh finds worth running, and the host.
declare -A dirs vers
if [[ -z $kernels || ,$kernels, == *,debian* ]]; then
	fetched=$(scripts/kernels/fetch.sh "$kernels")
	while read -r name ver dir; do dirs[$name]=$dir; vers[$name]=$ver; done <<< "$fetched"
	[[ -n $kernels ]] || kernels=$(awk '{printf "%s,", $1}' <<< "$fetched")host
fi

mkdir -p "$out"
status=0
for name in ${kernels//,/ }; do
	run=$build/out/$name
	mkdir -p "$run"
	start=$SECONDS
	if [[ $name == host ]]; then
		where=host
		timeout "$per_kernel" scripts/kernels/guest.sh host "$build/bin" "$run" "$tests" || echo "test-kernels: host: guest.sh exited $?" >&2
	else
		where=vm
		dir=${dirs[$name]:-}
		[[ -n $dir ]] || { echo "test-kernels: $name: not in the matrix fetched (fetch.sh)" >&2; continue; }
		# vng hands back the guest's exit code through udev's virtio ports;
		# qemu truncates a file given as its stdout, so its output is piped.
		timeout "$per_kernel" vng --run "$dir/boot/vmlinuz-${vers[$name]}" --disable-kvm --cpus 2 --memory 2G \
			--rwdir "$run" --exec "env MPSTEER_TIME_SCALE=$scale $root/scripts/kernels/guest.sh vm $build/bin $run $tests" 2>&1 | cat > "$run/console.log" ||
			echo "test-kernels: $name: the VM exited ${PIPESTATUS[0]} (console: $run/console.log)" >&2
	fi
	wall=$((SECONDS - start))
	if ! line=$("$build/kernelmatrix" collect -in "$run" -matrix "$name" -where "$where" -wall "$wall" -out "$out"); then
		echo "kernel $name: no result (see $run/guest.log and $run/console.log)"
		status=1
		continue
	fi
	echo "test-kernels: $name ($where) took $wall s"
	echo "$line"
	[[ $line == *" 0 failed,"* ]] || status=1
done
exit $status
