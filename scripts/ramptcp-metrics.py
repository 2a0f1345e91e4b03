#!/usr/bin/env python3
"""The RAMPTCP poster's figures from `mpsteer lab run` results.

Usage: scripts/ramptcp-metrics.py RESULTS_DIR... [--json]

For every variant of each run (RESULTS_DIR/<variant>/summary.json and
subflows.csv) over the bad period (from the scenario's first event on a
path to the event that ends it, or the end of the transfer):
  goodput         application goodput over the whole transfer (Mbit/s)
  retransmits     TCP segments retransmitted by the sender, whole transfer,
                  and in the bad period
  vs mptcp        both against the run's `mptcp` variant
  bad share       new data sent to the bad path: its bytes acknowledged at
                  the subflow level over all paths', in the bad period
  retx on bad     bytes retransmitted on the bad path per byte of new data
                  it carried, in the bad period
  reaction        from the loss's start to the first `backup=true` on the
                  bad path's subflow in the client daemon's actions (ms),
                  and in RTTs of the good path (its median SRTT in the
                  second before)
Standard library only.
"""
import csv
import json
import os
import statistics
import sys
from datetime import datetime


def parse_time(s):
    # RFC 3339 with nanoseconds: keep microseconds.
    if not s:
        return None
    s = s.replace("Z", "+00:00")
    head, _, tz = s.partition("+")
    if "." in head:
        base, frac = head.split(".")
        head = base + "." + (frac + "000000")[:6]
    return datetime.fromisoformat(head + ("+" + tz if tz else ""))


def bad_period(summary):
    evs = summary.get("events") or []
    if not evs:
        return None, 0.0, None
    first = evs[0]
    path, start = first["path"], first["at_s"]
    end = None
    for e in evs[1:]:
        if e["path"] == path:
            end = e["at_s"]
            break
    return path, start, end


def path_deltas(variant_dir, start, end):
    """Per path: bytes acked and retransmitted by the client's sockets
    between start and end (s)."""
    first, last = {}, {}
    with open(os.path.join(variant_dir, "subflows.csv")) as f:
        for row in csv.DictReader(f):
            if row["host"] != "client":
                continue
            t = float(row["time_s"])
            key = (row["path"], row["local"], row["remote"])
            vals = (int(row["bytes_acked"]), int(row["bytes_retrans"]), int(row["retransmits_total"]))
            if t <= start:
                first[key] = vals
            if end is None or t <= end:
                last[key] = vals
    out = {}
    for key, (acked, retx, segs) in last.items():
        a0, r0, s0 = first.get(key, (0, 0, 0))
        p = out.setdefault(key[0], [0, 0, 0])
        p[0] += acked - a0
        p[1] += retx - r0
        p[2] += segs - s0
    return out


def good_rtt(variant_dir, good, start):
    vals = []
    with open(os.path.join(variant_dir, "timeseries.csv")) as f:
        for row in csv.DictReader(f):
            t = float(row["time_s"])
            v = row.get(good + "_srtt_ms")
            if start - 1.0 <= t <= start and v:
                vals.append(float(v))
    return statistics.median(vals) if vals else None


def reaction(summary, bad_addr, event_at):
    d = (summary.get("daemon") or {}).get("client") or {}
    t0 = parse_time(event_at)
    if t0 is None:
        return None
    best = None
    for a in d.get("recent_actions") or []:
        if a.get("kind") != "backup" or not a.get("backup") or bad_addr not in a.get("target", ""):
            continue
        at = parse_time(a["at"])
        if at >= t0 and (best is None or at < best):
            best = at
    return None if best is None else (best - t0).total_seconds() * 1000


def analyse(run):
    rows = []
    for v in sorted(os.listdir(run)):
        vd = os.path.join(run, v)
        sp = os.path.join(vd, "summary.json")
        if not os.path.isfile(sp):
            continue
        s = json.load(open(sp))
        path, start, end = bad_period(s)
        r = {"variant": s["variant"], "goodput_mbit": s["goodput_mbit"], "retransmits": s["retransmits"]}
        if path:
            deltas = path_deltas(vd, start, end)
            total = sum(a for a, _, _ in deltas.values())
            acked, retx, _ = deltas.get(path, [0, 0, 0])
            r["retransmits_in_period"] = sum(x for _, _, x in deltas.values())
            r["bad_path"] = path
            r["bad_share"] = acked / total if total else None
            r["retx_on_bad"] = retx / acked if acked else None
            goods = [p for p in deltas if p != path]
            bad_addr = None
            for sf in s.get("subflows") or []:
                if sf["path"] == path:
                    bad_addr = sf["local"].rsplit(":", 1)[0]
            ev = (s.get("events") or [{}])[0]
            r["reaction_ms"] = reaction(s, bad_addr, ev.get("at")) if bad_addr else None
            rtt = good_rtt(vd, goods[0], start) if goods else None
            r["good_rtt_ms"] = rtt
            if r["reaction_ms"] is not None and rtt:
                r["reaction_rtts"] = r["reaction_ms"] / rtt
        rows.append(r)
    base = next((r for r in rows if r["variant"] == "mptcp"), None)
    for r in rows:
        if base and base["retransmits"]:
            r["retransmits_vs_mptcp"] = r["retransmits"] / base["retransmits"] - 1
        if base and base.get("retransmits_in_period") and r.get("retransmits_in_period") is not None:
            r["period_retransmits_vs_mptcp"] = r["retransmits_in_period"] / base["retransmits_in_period"] - 1
        if base and base["goodput_mbit"]:
            r["goodput_vs_mptcp"] = r["goodput_mbit"] / base["goodput_mbit"] - 1
    return rows


def fmt(v, spec, scale=1, suffix=""):
    return "–" if v is None else format(v * scale, spec) + suffix


def main():
    args = [a for a in sys.argv[1:] if a != "--json"]
    if not args:
        print(__doc__, file=sys.stderr)
        sys.exit(2)
    out = {}
    for run in args:
        out[run] = analyse(run)
    if "--json" in sys.argv:
        json.dump(out, sys.stdout, indent=1)
        print()
        return
    for run, rows in out.items():
        print(f"\n{run}\n")
        print("| variant | goodput (Mbit/s) | vs mptcp | retransmits | vs mptcp | in the bad period | vs mptcp | new data to bad path | retransmitted on it | reaction |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for r in rows:
            react = fmt(r.get("reaction_ms"), ".0f", suffix=" ms")
            if r.get("reaction_rtts") is not None:
                react += f" ({r['reaction_rtts']:.1f} RTT)"
            print(f"| {r['variant']} | {r['goodput_mbit']:.1f} | {fmt(r.get('goodput_vs_mptcp'), '+.0f', 100, '%')} | "
                  f"{r['retransmits']} | {fmt(r.get('retransmits_vs_mptcp'), '+.0f', 100, '%')} | "
                  f"{fmt(r.get('retransmits_in_period'), 'd')} | {fmt(r.get('period_retransmits_vs_mptcp'), '+.0f', 100, '%')} | "
                  f"{fmt(r.get('bad_share'), '.0f', 100, '%')} | {fmt(r.get('retx_on_bad'), '.0f', 100, '%')} | {react} |")


if __name__ == "__main__":
    main()
