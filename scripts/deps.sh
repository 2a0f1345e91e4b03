#!/usr/bin/env bash
# Installs what mpsteer needs and is missing, idempotently: Debian packages
# (clang/llvm for the BPF programs, libbpf headers, bpftool, iperf3,
# iproute2, mptcpd and its plugins for the lab's userspace path-manager
# variants; systemd for `systemd-analyze verify` of the unit, python3-venv
# for the Kubernetes manifest validator; curl and python3 are the
# unmodified applications of the per-application lab test), the Go modules (the program's and
# the tools' in tools/go.mod: nfpm for `make deb`), and
# kubernetes-validate from PyPI in .cache/venv (it ships the Kubernetes
# JSON schemas, so validation works offline). For `make test-kernels`
# (scripts/kernels/): qemu-system-x86 and virtme-ng (PyPI, in the same
# venv) boot the matrix's kernels, busybox-static is the shell of the
# initramfs virtme-ng builds (it copies the one binary, so it must be
# static; without it every guest fails with "initramfs is needed, and no
# busybox was found"), udev lets virtme-ng hand back the
# guest's exit code, kmod's depmod indexes the unpacked modules, and
# hostapd, wpasupplicant and iw make the Wi-Fi test's access point and
# station on mac80211_hwsim. A second run installs nothing.
set -euo pipefail
cd "$(dirname "$0")/.."

pkgs=(clang llvm libbpf-dev bpftool iperf3 iproute2 ca-certificates mptcpd mptcpd-plugins systemd python3-venv curl python3
	qemu-system-x86 busybox-static udev kmod hostapd wpasupplicant iw)
missing=()
for p in "${pkgs[@]}"; do
	dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
	if [[ $(id -u) -ne 0 ]]; then
		echo "deps: missing packages: ${missing[*]}; run as root (or: sudo apt-get install ${missing[*]})" >&2
		exit 1
	fi
	echo "deps: installing ${missing[*]}"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The Go version is go.mod's: a go command from 1.21 on fetches that
# toolchain by itself (GOTOOLCHAIN=auto, through the module proxy) when it
# is older.
gover=$(sed -n 's/^go \([0-9.]*\)$/\1/p' go.mod)
if ! command -v go >/dev/null; then
	echo "deps: the Go toolchain (go $gover, as go.mod says) is not on PATH; install it from https://go.dev/dl/" >&2
	exit 1
fi
go mod download
go mod download -modfile=tools/go.mod

# kubernetes-validate, pinned: the tests validate deploy/kubernetes with it.
kv=1.37.0
venv=.cache/venv
if [[ $("$venv/bin/kubernetes-validate" --version 2>/dev/null || true) != *"$kv"* ]]; then
	echo "deps: installing kubernetes-validate $kv in $venv"
	python3 -m venv "$venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "kubernetes-validate==$kv"
fi

# virtme-ng, pinned: make test-kernels boots each kernel of the matrix with it.
vng=1.42
if [[ $("$venv/bin/vng" --version 2>/dev/null || true) != *"$vng"* ]]; then
	echo "deps: installing virtme-ng $vng in $venv"
	"$venv/bin/pip" install -q --disable-pip-version-check "virtme-ng==$vng"
fi
