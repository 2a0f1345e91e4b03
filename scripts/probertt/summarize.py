#!/usr/bin/env python3
"""What a far path's BBR ProbeRTT costs a two-path connection, read from
`mpsteer lab run` output directories: for every ProbeRTT of the far path
(its client subflow under BBR with its window at 4 segments or less, after
more) in every run of the named variants, the connection's in-order goodput
over the 700 ms from its start (the app_goodput_mbit samples of the run's
timeseries.csv) over the run's own median sample, and whether the path was
set aside (backup) when it began.

usage: summarize.py OUT RUNDIR... [--far slow] [--variants mptcp,mptcp+ecf]

Writes OUT/GROUP-SCENARIO-VARIANT-RUN-K.json, one per ProbeRTT, with the
provenance of the lab run it comes from. GROUP: "mptcp" (default MPTCP),
"ecf-aside" (the policy's runs, the path aside when its ProbeRTT began),
"ecf-carrying" (the policy's runs, the path carrying then). Prints a line
per ProbeRTT and the median of each group.
"""
import argparse, csv, glob, json, os, statistics, sys


def onsets(path, far):
    rows = [r for r in csv.DictReader(open(path)) if r["host"] == "client" and r["path"] == far]
    out, prev = [], False
    for r in rows:
        low = int(r["cwnd_pkts"]) <= 4 and r["cc"].startswith("bbr")
        if low and not prev:
            out.append({"t_s": float(r["time_s"]), "unacked_pkts": int(r["unacked_pkts"]),
                        "aside": r["backup_local"] == "true"})
        prev = low
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("rundirs", nargs="+")
    ap.add_argument("--far", default="slow")
    ap.add_argument("--variants", default="mptcp,mptcp+ecf")
    ap.add_argument("--window", type=float, default=0.7, help="seconds from the ProbeRTT's start")
    a = ap.parse_args()
    os.makedirs(a.out, exist_ok=True)
    groups = {}
    for rundir in a.rundirs:
        res = json.load(open(os.path.join(rundir, "results.json")))
        scenario = res["scenario"]
        prov = dict(res["provenance"])
        prov["command"] = prov["command"] + "; scripts/probertt/summarize.py " + " ".join(sys.argv[1:])
        for v in a.variants.split(","):
            for d in sorted(glob.glob(os.path.join(rundir, v, "run-*"))):
                run = os.path.basename(d)
                if not os.path.exists(os.path.join(d, "summary.json")):
                    continue
                ts = [r for r in csv.DictReader(open(os.path.join(d, "timeseries.csv"))) if r["app_goodput_mbit"]]
                med = statistics.median(float(r["app_goodput_mbit"]) for r in ts)
                for k, e in enumerate(onsets(os.path.join(d, "subflows.csv"), a.far), 1):
                    w = [float(r["app_goodput_mbit"]) for r in ts if e["t_s"] <= float(r["time_s"]) < e["t_s"] + a.window]
                    if not w:
                        continue
                    group = "mptcp" if v == "mptcp" else ("ecf-aside" if e["aside"] else "ecf-carrying")
                    doc = {"provenance": prov, "scenario": scenario, "variant": v, "run": run, "far_path": a.far,
                           "probe_rtt_start_s": e["t_s"], "far_unacked_pkts": e["unacked_pkts"], "far_aside": e["aside"],
                           "window_ms": round(a.window * 1000), "goodput_mbit": statistics.mean(w),
                           "run_median_mbit": med, "goodput_ratio": statistics.mean(w) / med}
                    with open(os.path.join(a.out, f"{group}-{scenario}-{v.replace('+', '-')}-{run}-{k}.json"), "w") as f:
                        json.dump(doc, f, indent=2)
                        f.write("\n")
                    groups.setdefault(group, []).append(doc["goodput_ratio"])
                    print(f"{scenario:<16} {v:<10} {run:<6} {e['t_s']:6.1f} s  aside {str(e['aside']):<5} unacked {e['unacked_pkts']:4d}  "
                          f"{doc['goodput_mbit']:5.1f} Mbit/s over {round(a.window*1000)} ms, run median {med:5.1f}: {doc['goodput_ratio']:.2f}")
    for g, rs in sorted(groups.items()):
        print(f"{g}: {len(rs)} ProbeRTTs, goodput over the {round(a.window*1000)} ms from each over the run's median: median {statistics.median(rs):.2f}")


if __name__ == "__main__":
    main()
