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
# Guests run side by side, MPSTEER_KERNEL_JOBS at a time (default: one per
# core, at most 2), each with the cores shared out.
cores=$(nproc)
jobs=${MPSTEER_KERNEL_JOBS:-$(( cores < 2 ? 1 : 2 ))}
cpus=$(( cores / jobs < 1 ? 1 : cores / jobs ))
out=${MPSTEER_KERNEL_RESULTS:-$root/results/kernels}
build=$root/build/kernels
tests=$(realpath "${MPSTEER_KERNEL_TESTS:-scripts/kernels/tests.txt}")
venv=$root/.cache/venv
# The command line the results' provenance names: this script and the
# settings that shape the matrix.
command="scripts/kernels/run.sh"
for v in MPSTEER_KERNEL_TESTS MPSTEER_KERNEL_TIMEOUT MPSTEER_VM_TIME_SCALE MPSTEER_KERNEL_JOBS MPSTEER_KERNELS; do
	[[ -z ${!v:-} ]] || command="$v=${!v} $command"
done

[[ $(id -u) -eq 0 ]] || { echo "test-kernels: needs root (the tests build namespaces and load BPF programs)" >&2; exit 1; }
[[ -x $venv/bin/vng ]] || { echo "test-kernels: virtme-ng is missing: make deps installs it in $venv" >&2; exit 1; }
export PATH=$venv/bin:$PATH

# The test binaries, built once on the host (the guests see the host's
# files: the same binaries run everywhere).
rm -rf "$build"; mkdir -p "$build/bin"
go build -o "$build/bin/mpsteer" ./cmd/mpsteer
go build -o "$build/bin/test2json" cmd/test2json
go build -o "$build/kernelmatrix" ./cmd/kernelmatrix
# In one go command (the packages compile side by side), each named for
# its last element, then renamed PKG.test with / as _ (guest.sh's names).
pkgs=$(grep -v '^#' "$tests" | awk 'NF {print $1}' | sort -u)
mkdir -p "$build/tests"
go test -c -o "$build/tests/" $(sed 's|^|./|' <<< "$pkgs")
while read -r pkg; do
	mv "$build/tests/${pkg##*/}.test" "$build/bin/${pkg//\//_}.test"
done <<< "$pkgs"

# By default the matrix is what fetch.sh finds worth running, and the host.
declare -A dirs vers
if [[ -z $kernels || ,$kernels, == *,debian* ]]; then
	fetched=$(scripts/kernels/fetch.sh "$kernels")
	while read -r name ver dir; do dirs[$name]=$dir; vers[$name]=$ver; done <<< "$fetched"
	[[ -n $kernels ]] || kernels=$(awk '{printf "%s,", $1}' <<< "$fetched")host
fi

mkdir -p "$out"

# run_one NAME: one kernel's run, its result collected; the lines it
# prints go to the run's summary file.
run_one() {
	local name=$1 run=$build/out/$1 start=$SECONDS began where dir line wall
	began=$(date -u +%Y-%m-%dT%H:%M:%SZ)
	mkdir -p "$run"
	if [[ $name == host ]]; then
		where=host
		timeout "$per_kernel" scripts/kernels/guest.sh host "$build/bin" "$run" "$tests" || echo "test-kernels: host: guest.sh exited $?" >&2
	else
		where=vm
		dir=${dirs[$name]:-}
		[[ -n $dir ]] || { echo "kernel $name: not in the matrix fetched (fetch.sh)" > "$run/summary"; return; }
		# vng hands back the guest's exit code through udev's virtio ports;
		# qemu truncates a file given as its stdout, so its output is piped.
		timeout "$per_kernel" vng --run "$dir/boot/vmlinuz-${vers[$name]}" --disable-kvm --cpus "$cpus" --memory 2G \
			--rwdir "$run" --exec "env MPSTEER_TIME_SCALE=$scale $root/scripts/kernels/guest.sh vm $build/bin $run $tests" 2>&1 | cat > "$run/console.log" ||
			echo "test-kernels: $name: the VM exited ${PIPESTATUS[0]} (console: $run/console.log)" >&2
	fi
	wall=$((SECONDS - start))
	if ! line=$("$build/kernelmatrix" collect -in "$run" -matrix "$name" -where "$where" -wall "$wall" \
		-start "$began" -command "$command" -out "$out"); then
		echo "kernel $name: no result (see $run/guest.log and $run/console.log)" > "$run/summary"
		return
	fi
	printf 'test-kernels: %s (%s) took %d s\n%s\n' "$name" "$where" "$wall" "$line" > "$run/summary"
}

# The guests run side by side, $jobs at a time with a share of the cores
# each (software emulation keeps one core busy per virtual CPU); the host
# runs after them, alone.
names=(${kernels//,/ })
running=0
for name in "${names[@]}"; do
	[[ $name == host ]] && continue
	run_one "$name" &
	if (( ++running >= jobs )); then wait -n; running=$((running - 1)); fi
done
wait
[[ ,$kernels, != *,host,* ]] || run_one host
status=0
for name in "${names[@]}"; do
	cat "$build/out/$name/summary"
	grep -q '^kernel .*: [0-9]* passed, 0 failed, [0-9]* skipped$' "$build/out/$name/summary" || status=1
done
exit $status
