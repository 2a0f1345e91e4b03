#!/usr/bin/env bash
# Installs what mpsteer needs and is missing, idempotently: Debian packages
# (clang/llvm for the BPF programs, libbpf headers, bpftool, iperf3,
# iproute2, mptcpd and its plugins for the lab's userspace path-manager
# variants) and the Go modules. A second run installs nothing.
set -euo pipefail

pkgs=(clang llvm libbpf-dev bpftool iperf3 iproute2 ca-certificates mptcpd mptcpd-plugins)
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

if ! command -v go >/dev/null; then
	echo "deps: the Go toolchain (go 1.24 or newer) is not on PATH; install it from https://go.dev/dl/" >&2
	exit 1
fi
go mod download
