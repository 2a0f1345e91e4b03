#!/usr/bin/env bash
# When a subflow that joined as backup first carries, against default MPTCP.
#
# Usage: scripts/join-trace/run.sh OUT N BEFORE_BIN AFTER_BIN
#
# Runs the scenario beside this script (one 8 MiB upload over two paths,
# the joiner's at 25 ms one way) N rounds; each round runs, each in a fresh
# lab world with a packet capture on the client: mptcp+dynthresh with
# BEFORE_BIN, mptcp+dynthresh with AFTER_BIN, default MPTCP with AFTER_BIN.
# summarize.py then writes OUT/<before|after|mptcp>-run-<round>.json: the
# time from the joiner's fourth ACK (the first packet it receives after its
# SYN-ACK: the join has completed) to its first data segment, with the
# run's goodput and the provenance of the binary that ran it. Needs root
# and tcpdump (installed with apt-get when missing). A run that failed is
# kept (OUT/raw) and enters no file.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=$1 n=$2 before=$3 after=$4
scen=$here/twopath-5-25ms-8mib-cubic.yaml
command -v tcpdump >/dev/null || apt-get install -y tcpdump >/dev/null
mkdir -p "$out/raw"
one() { # label binary variant round
	local dir=$out/raw/$1-run-$4 name=jt$$-$4-$1
	rm -rf "$dir"
	mkdir -p "$dir"
	# The capture starts as soon as the lab's client namespace exists,
	# before the daemon and the traffic.
	(
		for _ in $(seq 1 1000); do
			if ip netns list | grep -q "^mps-$name-client"; then
				exec ip netns exec "mps-$name-client" tcpdump -i any -s 128 -w "$dir/client.pcap" tcp 2>/dev/null
			fi
			sleep 0.005
		done
	) &
	local cap=$!
	"$2" lab run "$scen" --runs 1 --variants "$3" --name "$name" --out "$dir/run" >"$dir/log" 2>&1 || echo "$1 round $4 failed: $dir/log" >&2
	sleep 0.3
	kill "$cap" 2>/dev/null || true
	wait "$cap" 2>/dev/null || true
}
for r in $(seq 1 "$n"); do
	echo "round $r of $n" >&2
	one before "$before" mptcp+dynthresh "$r"
	one after "$after" mptcp+dynthresh "$r"
	one mptcp "$after" mptcp "$r"
done
python3 "$here/summarize.py" "$out" "$0 $*"
