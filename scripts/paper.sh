#!/usr/bin/env bash
# Runs every scenario the measured results quote (docs/results.md), RUNS
# paired runs each (default 5), and keeps what the document is rendered
# from beside it: per scenario the run's results.json (every run of every
# variant, with its provenance) as docs/data/<scenario>/results.json, and
# the comparison plots (docs/figures/). Full runs land in
# results/paper/<scenario>/. Then `make docs` renders the figures. A
# scenario measured here replaces its legacy data: take it out of
# docs/data/legacy.yaml (its sources stay archived, under archived:).
# Usage: scripts/paper.sh [SCENARIO-GLOB...] (default: every scenario but
# the demo). Takes hours for all.
set -euo pipefail
cd "$(dirname "$0")/.."
bin=bin/mpsteer
[[ -x $bin ]] || { echo "paper: build first (make build)" >&2; exit 1; }
mkdir -p results/paper docs/data docs/figures
globs=("$@")
((${#globs[@]})) || globs=(scenarios/*.yaml)
for f in "${globs[@]}"; do
	name=$(basename "$f" .yaml)
	[[ $name == demo ]] && continue
	echo "paper: $name" >&2
	$bin lab run "$f" --runs "${RUNS:-5}" --out "results/paper/$name"
	mkdir -p "docs/data/$name"
	cp "results/paper/$name/results.json" "docs/data/$name/results.json"
	cp "results/paper/$name/compare.png" "docs/figures/$name.png"
	[[ -f results/paper/$name/fct_cdf.png ]] && cp "results/paper/$name/fct_cdf.png" "docs/figures/$name-fct-cdf.png"
done
# Goodput against subflows per address pair, one line per core size and
# spreading mode (the M-fullmesh poster's figure).
if ls -d results/paper/fullmesh-[0-9]* >/dev/null 2>&1; then
	$bin lab sweep results/paper/fullmesh-[0-9]* --variants '^fullmesh-(?P<x>[0-9]+)(?P<series>-ecmp)?$' \
		--title "M-fullmesh: goodput against subflows per address pair (320 Mbit/s of core)" \
		--xlabel "subflows per address pair" --default-series pinned --out docs/figures/fullmesh-sweep.png
fi
# Coupled congestion control: MPTCP's goodput over one TCP flow's against
# the subflows sharing the bottleneck, one line per algorithm and number of
# TCP flows (issue 26).
if ls -d results/paper/coupled-sweep-c[0-9]* >/dev/null 2>&1; then
	$bin lab sweep results/paper/coupled-sweep-c[0-9]* --metric ratio_to_competitor_flow \
		--variants '^(?P<series>mptcp|lia|balia)-(?P<x>[0-9]+)$' \
		--title "one bottleneck: MPTCP's goodput over one TCP flow's (coupled-sweep-c1..c4)" \
		--xlabel "subflows through the bottleneck" --out docs/figures/coupled-sweep.png
fi
# eMPTCP Fig. 7a: the VM pairs' aggregate goodput against ECMP (the
# paper's baseline), by the number of pairs.
if ls -d results/paper/tenants-pairs[0-9]* >/dev/null 2>&1; then
	$bin lab sweep results/paper/tenants-pairs[0-9]* --scenarios '^tenants-pairs(?P<x>[0-9]+)$' \
		--variants '^(tcp-best|mptcp|mptcp\+spread)$' --over mptcp-ecmp --log-x \
		--title "eMPTCP Fig. 7a: aggregate goodput against ECMP, by VM pairs (2 × 100 Mbit/s)" \
		--xlabel "VM pairs" --out docs/figures/tenants-pairs-sweep.png
fi
