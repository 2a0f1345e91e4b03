#!/usr/bin/env bash
# Runs every scenario the measured results quote (docs/results.md) and
# keeps what the document quotes beside it: per scenario the variants'
# figures in compact JSON (docs/data/<scenario>.json, from `mpsteer lab
# table --json`) and the comparison plots (docs/figures/). Full runs land
# in results/paper/<scenario>/. Usage: scripts/paper.sh [SCENARIO-GLOB...]
# (default: every scenario but the demo). Takes about an hour for all.
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
	$bin lab run "$f" --out "results/paper/$name"
	$bin lab table "results/paper/$name" --json > "docs/data/$name.json"
	cp "results/paper/$name/compare.png" "docs/figures/$name.png"
	[[ -f results/paper/$name/fct_cdf.png ]] && cp "results/paper/$name/fct_cdf.png" "docs/figures/$name-fct-cdf.png"
done
# Goodput against subflows per address pair, one line per core size and
# spreading mode (the M-fullmesh poster's figure).
if ls -d results/paper/fullmesh-[0-9]* >/dev/null 2>&1; then
	$bin lab sweep results/paper/fullmesh-[0-9]* --variants '^fullmesh-(?P<x>[0-9]+)(?P<series>-ecmp)?$' \
		--title "M-fullmesh: goodput against subflows per address pair (320 Mbit/s of core)" \
		--xlabel "subflows per address pair" --default-series pinned --out docs/figures/fullmesh-sweep.png
	cp docs/figures/fullmesh-sweep.csv docs/data/fullmesh-sweep.csv
fi
