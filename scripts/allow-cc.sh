#!/usr/bin/env bash
# Lets the lab's network namespaces pick the congestion controls its
# scenarios and benchmarks name (`hosts: {client: {cc: cubic}}`, the
# CUBIC twins): a namespace other than the host's may only set one the
# host allows (net.ipv4.tcp_allowed_congestion_control), and some hosts
# allow only their default and reno. Adds each named one that is loaded
# and not allowed, and says so; changes nothing else. Run by `make bench`
# and `make reproduce` (root).
set -euo pipefail
want=(cubic bbr reno)
allowed=$(cat /proc/sys/net/ipv4/tcp_allowed_congestion_control)
avail=$(cat /proc/sys/net/ipv4/tcp_available_congestion_control)
add=()
for cc in "${want[@]}"; do
	if [[ " $avail " == *" $cc "* && " $allowed " != *" $cc "* ]]; then
		add+=("$cc")
	fi
done
((${#add[@]})) || exit 0
echo "allow-cc: allowing ${add[*]} in network namespaces (net.ipv4.tcp_allowed_congestion_control was \"$allowed\")"
sysctl -q -w net.ipv4.tcp_allowed_congestion_control="$allowed ${add[*]}"
