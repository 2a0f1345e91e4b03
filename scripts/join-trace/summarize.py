#!/usr/bin/env python3
"""Summarize scripts/join-trace/run.sh's runs.

Usage: scripts/join-trace/summarize.py OUT COMMAND

For each run in OUT/raw/<label>-run-<round>/ (a `mpsteer lab run` in run/,
the client's capture in client.pcap), it finds the joiner (the subflow on
path b, from the run's results) in the capture and writes
OUT/<label>-run-<round>.json:
  fourth_ack_to_first_data_ms  from the first packet the joiner receives
                               after its SYN-ACK (the fourth ACK: its join
                               has completed, it may carry) to the first
                               data segment it sends
  synack_to_fourth_ack_ms      the join's last round trip
  goodput_mbit                 the run's goodput
  provenance                   the run's (the binary that ran it), with
                               COMMAND as the command
A run the lab marked failed, or whose capture lacks the joiner's packets,
is said on stderr and gets no file. Standard library only (tcpdump reads
the capture).
"""
import json
import os
import re
import subprocess
import sys


def joiner(results):
    """The variant's one counted run and its subflow on path b."""
    for v in results["variants"].values():
        runs = [r for r in v["runs"] if not r["failed"]]
        if len(runs) != 1 or v.get("failed_runs"):
            return None, None
        for sf in runs[0]["subflows"]:
            if sf["path"] == "b":
                return runs[0], sf
    return None, None


def times(pcap, local, remote):
    """The SYN-ACK, fourth ACK and first data segment of one subflow (s)."""
    out = subprocess.run(["tcpdump", "-r", pcap, "-nn", "-tt", "tcp"], capture_output=True, text=True, check=True).stdout
    # tcpdump writes an IPv4 address and port as a.b.c.d.port
    local, remote = (a.rsplit(":", 1)[0] + "." + a.rsplit(":", 1)[1] for a in (local, remote))
    fwd, back = f"{local} > {remote}:", f"{remote} > {local}:"
    synack = fourth = None
    for line in out.splitlines():
        t = float(line.split()[0])
        if synack is None:
            if back in line and "Flags [S.]" in line:
                synack = t
        elif fourth is None:
            if back in line:
                fourth = t
        elif fwd in line and not re.search(r"length 0$", line):
            return synack, fourth, t
    return None


def main():
    out, command = sys.argv[1], sys.argv[2]
    raw = os.path.join(out, "raw")
    for name in sorted(os.listdir(raw)):
        d = os.path.join(raw, name)
        try:
            with open(os.path.join(d, "run", "results.json")) as f:
                res = json.load(f)
        except OSError as e:
            print(f"{name}: no results ({e}): left out", file=sys.stderr)
            continue
        run, sf = joiner(res)
        if run is None:
            print(f"{name}: the lab marked a run failed, or no subflow on path b: left out", file=sys.stderr)
            continue
        t = times(os.path.join(d, "client.pcap"), sf["local"], sf["remote"])
        if t is None:
            print(f"{name}: the capture lacks the joiner {sf['local']}'s handshake or data: left out", file=sys.stderr)
            continue
        prov = dict(res["provenance"])
        prov["command"] = command
        doc = {
            "provenance": prov,
            "scenario": res["scenario"],
            "variant": run["variant"],
            "joiner": sf["local"],
            "fourth_ack_to_first_data_ms": (t[2] - t[1]) * 1000,
            "synack_to_fourth_ack_ms": (t[1] - t[0]) * 1000,
            "goodput_mbit": run["goodput_mbit"],
        }
        with open(os.path.join(out, name + ".json"), "w") as f:
            json.dump(doc, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
