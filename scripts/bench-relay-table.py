#!/usr/bin/env python3
"""Prints the figures of a scripts/bench-relay run side by side, with the issue's targets.

Usage: bench-relay-table.py OUT_DIR   (the directory bench-relay wrote its results to)
Reads OUT_DIR/g*.json, signed.json, rate.json (pipehub loadgen reports) and bgio.json (the
peer harness's results file), and prints markdown tables.
"""
import glob
import json
import os
import sys

out = sys.argv[1]


def load(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def num(v, fmt="{:,.0f}"):
    return "-" if v is None else fmt.format(v)


def ms(v):
    return num(v, "{:.2f}")


def mib(b):
    return num(None if b is None else b / 2**20, "{:.1f}")


def per_game_kib(r, key="hub_rss_seated_bytes"):
    """Hub memory per open game: by default once every game was seated and before any move
    (open games and their sockets only); with key="hub_rss_bytes", at the end of the run,
    which also holds what the games finished during the run left behind."""
    if not r.get(key) or r.get("hub_rss_idle_bytes") is None or not r.get("games"):
        return None
    return (r[key] - r["hub_rss_idle_bytes"]) / 1024 / r["games"]


hub = {}
for path in glob.glob(os.path.join(out, "*.json")):
    name = os.path.basename(path)[:-5]
    if name != "bgio":
        hub[name] = load(path)
bgio = {r["scenario"]["G"]: r for r in load(os.path.join(out, "bgio.json")).get("results", [])
        if "scenario" in r and not r.get("error")}

print("\n### pipehub (release build, `pipehub loadgen`, hub and load generator on the same 2 cores)\n")
print("| case | loadgen flags | moves/s | p50 ms | p90 ms | p99 ms | max ms | refused | errors | hub RSS idle / seated / end MiB | KiB per open game, seated / end | hub CPU s | steal s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
order = sorted((k for k in hub if k.startswith("g")), key=lambda k: int(k[1:])) + ["signed", "rate"]
for k in order:
    r = hub.get(k)
    if not r:
        continue
    l = r.get("latency_ms") or {}
    print(f"| {k} | `{r.get('args', '')}` | {num(r.get('moves_per_s'))} | {ms(l.get('p50'))} | {ms(l.get('p90'))} | "
          f"{ms(l.get('p99'))} | {ms(l.get('max'))} | {num(r.get('refused'))} | {num(r.get('errors'))} | "
          f"{mib(r.get('hub_rss_idle_bytes'))} / {mib(r.get('hub_rss_seated_bytes'))} / {mib(r.get('hub_rss_bytes'))} | "
          f"{num(per_game_kib(r), '{:.1f}')} / {num(per_game_kib(r, 'hub_rss_bytes'), '{:.1f}')} | {num(r.get('hub_cpu_s'), '{:.1f}')} | {num(r.get('machine_steal_s'), '{:.2f}')} |")

if bgio:
    print("\n### side by side with boardgame.io (same workload, same session)\n")
    print("| G | pipehub moves/s | boardgame.io moves/s | ratio | pipehub p99 ms | boardgame.io p99 ms | ratio | pipehub RSS MiB | boardgame.io RSS peak MiB | ratio |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for g, b in sorted(bgio.items()):
        r = hub.get(f"g{g}", {})
        l = r.get("latency_ms") or {}
        bl = b.get("latencyMs") or {}
        mr = r.get("moves_per_s") / b["movesPerS"] if r.get("moves_per_s") and b.get("movesPerS") else None
        pr = l.get("p99") / bl["p99"] if l.get("p99") and bl.get("p99") else None
        rss = r.get("hub_rss_bytes")
        brss = b.get("serverRssPeakMiB")
        rr = (rss / 2**20) / brss if rss and brss else None
        print(f"| {g} | {num(r.get('moves_per_s'))} | {num(b.get('movesPerS'))} | {num(mr, '{:.1f}x')} | "
              f"{ms(l.get('p99'))} | {ms(bl.get('p99'))} | {num(pr, '{:.2f}x')} | {mib(rss)} | {num(brss, '{:.1f}')} | {num(rr, '{:.2f}x')} |")

print("\n### targets\n")
big = max((hub[k] for k in hub if k.startswith("g")), key=lambda r: r.get("games") or 0, default=None)
sat = max((hub[k] for k in hub if k.startswith("g")), key=lambda r: r.get("moves_per_s") or 0, default={})
checks = [
    ("10,000 games held", ((big or {}).get("games") or 0) >= 10000 and (big or {}).get("moves", 0) > 0,
     f"largest run: G={(big or {}).get('games')}, {num((big or {}).get('moves'))} moves"),
    ("unsigned saturation >= 15,000 moves/s", (sat.get("moves_per_s") or 0) >= 15000,
     f"{num(sat.get('moves_per_s'))} moves/s at G={sat.get('games')}"),
    ("signed (hub-held keys) >= 6,000 moves/s", ((hub.get("signed") or {}).get("moves_per_s") or 0) >= 6000,
     f"{num((hub.get('signed') or {}).get('moves_per_s'))} moves/s"),
    ("p99 <= 5 ms at the offered rate", 0 < (((hub.get("rate") or {}).get("latency_ms") or {}).get("p99") or 1e9) <= 5,
     f"p99 {ms(((hub.get('rate') or {}).get('latency_ms') or {}).get('p99'))} ms at {num((hub.get('rate') or {}).get('moves_per_s'))} moves/s"),
    (f"<= 48 KiB of hub memory per open game (G={(big or {}).get('games')})", (per_game_kib(big or {}) or 1e9) <= 48,
     f"{num(per_game_kib(big or {}), '{:.1f}')} KiB once seated, "
     f"{num(per_game_kib(big or {}, 'hub_rss_bytes'), '{:.1f}')} KiB at the end of the run"),
]
for g, want, key in [(1000, 10, "moves"), (10, 0.1, "p99"), (1000, 0.25, "rss")]:
    b, r = bgio.get(g), hub.get(f"g{g}")
    if not b or not r:
        continue
    if key == "moves":
        v = (r.get("moves_per_s") or 0) / max(b.get("movesPerS") or 1, 1)
        checks.append((f">= 10x boardgame.io moves/s at G={g}", v >= want, f"{v:.1f}x"))
    elif key == "p99":
        v = ((r.get("latency_ms") or {}).get("p99") or 1e9) / max((b.get("latencyMs") or {}).get("p99") or 1e-9, 1e-9)
        checks.append((f"<= 0.1x boardgame.io p99 at G={g}", v <= want, f"{v:.2f}x"))
    else:
        v = (r.get("hub_rss_bytes") or 1e18) / 2**20 / max(b.get("serverRssPeakMiB") or 1e-9, 1e-9)
        checks.append((f"<= 0.25x boardgame.io server memory at G={g}", v <= want, f"{v:.2f}x"))
for what, ok, detail in checks:
    print(f"- [{'x' if ok else ' '}] {what}: {detail}")
