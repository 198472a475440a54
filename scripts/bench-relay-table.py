#!/usr/bin/env python3
"""Prints the figures of a scripts/bench-relay run side by side, with the issue's targets.

Usage: bench-relay-table.py OUT_DIR   (the directory bench-relay wrote its results to)
Reads each round's g*.json, signed.json, rate.json (pipehub loadgen reports), bgio.json
(the peer harness's results file) and floor/SERVER-gG.json (relay_floor reports) from
OUT_DIR/r1, r2, … (or from OUT_DIR itself, as a run before rounds wrote them), and prints
markdown tables. With several rounds, every
figure is the median over the rounds (a ratio is the ratio of the two medians), and the
moves/s and p99 columns also give the range the rounds spanned.
"""
import glob
import json
import os
import statistics
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


def round_dirs(out):
    dirs = sorted(glob.glob(os.path.join(out, "r[0-9]*")), key=lambda d: int(os.path.basename(d)[1:]))
    return [d for d in dirs if os.path.isdir(d)] or [out]


def read_round(d):
    hub = {}
    for path in glob.glob(os.path.join(d, "*.json")):
        name = os.path.basename(path)[:-5]
        if name != "bgio":
            hub[name] = load(path)
    bgio = {r["scenario"]["G"]: r for r in load(os.path.join(d, "bgio.json")).get("results", [])
            if "scenario" in r and not r.get("error")}
    floor = {}
    for path in glob.glob(os.path.join(d, "floor", "*.json")):
        r = load(path)
        if r.get("moves"):
            floor[(r["server"], r["games"])] = r
    return hub, bgio, floor


def median_of(reports):
    """One report of the same shape whose every number is the median of the reports' (those
    that have it); anything else is the first report's."""
    reports = [r for r in reports if r is not None]
    if not reports:
        return None
    first = reports[0]
    if isinstance(first, dict):
        keys = dict.fromkeys(k for r in reports if isinstance(r, dict) for k in r)
        return {k: median_of([r.get(k) for r in reports if isinstance(r, dict)]) for k in keys}
    if isinstance(first, (int, float)) and not isinstance(first, bool):
        nums = [r for r in reports if isinstance(r, (int, float)) and not isinstance(r, bool)]
        if all(isinstance(n, int) for n in nums):
            return statistics.median_low(nums)
        return statistics.median(nums)
    return first


def spread(values, fmt):
    """ " (lo–hi)" over the rounds, or nothing with one round."""
    values = [v for v in values if v is not None]
    if len(values) < 2:
        return ""
    return f" ({fmt.format(min(values))}–{fmt.format(max(values))})"


rounds = [read_round(d) for d in round_dirs(out)]
hub = {k: median_of([h.get(k) for h, _, _ in rounds]) or {} for k in dict.fromkeys(k for h, _, _ in rounds for k in h)}
bgio = {g: median_of([b.get(g) for _, b, _ in rounds]) or {} for g in dict.fromkeys(g for _, b, _ in rounds for g in b)}
floor = {k: median_of([f.get(k) for _, _, f in rounds]) or {} for k in dict.fromkeys(k for _, _, f in rounds for k in f)}


def per_round(case, pick):
    return [pick(h.get(case) or {}) for h, _, _ in rounds]


def cpu_per_move(r, side):
    """µs of `side`'s CPU a move while the clock ran (loadgen's `cpu_s`), or None."""
    cpu = (r.get("cpu_s") or {}).get(side)
    return cpu * 1e6 / r["moves"] if cpu is not None and r.get("moves") else None


def p99_of(r):
    return (r.get("latency_ms") or {}).get("p99")


if len(rounds) > 1:
    print(f"\n{len(rounds)} rounds: each figure is the median over them; moves/s and p99 give their range too.")

print("\n### pipehub (release build, `pipehub loadgen`, hub and load generator on the same 2 cores)\n")
print("| case | loadgen flags | moves/s | p50 ms | p90 ms | p99 ms | max ms | refused | errors | hub RSS idle / seated / end MiB | KiB per open game, seated / end | hub CPU s | CPU a move while playing: hub / loadgen µs | steal s |")
print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
order = sorted((k for k in hub if k.startswith("g")), key=lambda k: int(k[1:])) + ["signed", "rate"]
for k in order:
    r = hub.get(k)
    if not r:
        continue
    l = r.get("latency_ms") or {}
    mvs = spread(per_round(k, lambda x: x.get("moves_per_s")), "{:,.0f}")
    p99s = spread(per_round(k, p99_of), "{:.2f}")
    print(f"| {k} | `{r.get('args', '')}` | {num(r.get('moves_per_s'))}{mvs} | {ms(l.get('p50'))} | {ms(l.get('p90'))} | "
          f"{ms(l.get('p99'))}{p99s} | {ms(l.get('max'))} | {num(r.get('refused'))} | {num(r.get('errors'))} | "
          f"{mib(r.get('hub_rss_idle_bytes'))} / {mib(r.get('hub_rss_seated_bytes'))} / {mib(r.get('hub_rss_bytes'))} | "
          f"{num(per_game_kib(r), '{:.1f}')} / {num(per_game_kib(r, 'hub_rss_bytes'), '{:.1f}')} | {num(r.get('hub_cpu_s'), '{:.1f}')} | "
          f"{num(cpu_per_move(r, 'hub'), '{:.1f}')} / {num(cpu_per_move(r, 'loadgen'), '{:.1f}')} | {num(r.get('machine_steal_s'), '{:.2f}')} |")

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
        bmv = spread([(bb.get(g) or {}).get("movesPerS") for _, bb, _ in rounds], "{:,.0f}")
        bp99 = spread([((bb.get(g) or {}).get("latencyMs") or {}).get("p99") for _, bb, _ in rounds], "{:.2f}")
        print(f"| {g} | {num(r.get('moves_per_s'))} | {num(b.get('movesPerS'))}{bmv} | {num(mr, '{:.1f}x')} | "
              f"{ms(l.get('p99'))} | {ms(bl.get('p99'))}{bp99} | {num(pr, '{:.2f}x')} | {mib(rss)} | {num(brss, '{:.1f}')} | {num(rr, '{:.2f}x')} |")

if floor:
    print("\n### the transport's floor (relay_floor: the same closed loop, no game, no store, no JSON; same session)\n")
    print("| server | pairs | moves/s | p50 ms | p90 ms | p99 ms | CPU a move: server / driver µs | moves/s against boardgame.io | p99 against boardgame.io |")
    print("|---|---|---|---|---|---|---|---|---|")
    for (server, g), f in sorted(floor.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        l = f.get("latency_ms") or {}
        c = f.get("cpu_us_per_move") or {}
        b = bgio.get(g) or {}
        bl = b.get("latencyMs") or {}
        mr = f["moves_per_s"] / b["movesPerS"] if f.get("moves_per_s") and b.get("movesPerS") else None
        pr = l["p99"] / bl["p99"] if l.get("p99") and bl.get("p99") else None
        fmv = spread([(ff.get((server, g)) or {}).get("moves_per_s") for _, _, ff in rounds], "{:,.0f}")
        fp99 = spread([((ff.get((server, g)) or {}).get("latency_ms") or {}).get("p99") for _, _, ff in rounds], "{:.2f}")
        print(f"| {server} | {g} | {num(f.get('moves_per_s'))}{fmv} | {ms(l.get('p50'))} | {ms(l.get('p90'))} | {ms(l.get('p99'))}{fp99} | "
              f"{num(c.get('server'), '{:.1f}')} / {num(c.get('driver'), '{:.1f}')} | {num(mr, '{:.1f}x')} | {num(pr, '{:.2f}x')} |")

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
def moves_ratio(r, b):
    return (r.get("moves_per_s") or 0) / max(b.get("movesPerS") or 1, 1)


def p99_ratio(r, b):
    return ((r.get("latency_ms") or {}).get("p99") or 1e9) / max((b.get("latencyMs") or {}).get("p99") or 1e-9, 1e-9)


def rss_ratio(r, b):
    return (r.get("hub_rss_bytes") or 1e18) / 2**20 / max(b.get("serverRssPeakMiB") or 1e-9, 1e-9)


for g, ratio, what, ok, fmt in [
    (1000, moves_ratio, ">= 10x boardgame.io moves/s", lambda v: v >= 10, "{:.1f}x"),
    (10, p99_ratio, "<= 0.1x boardgame.io p99", lambda v: v <= 0.1, "{:.2f}x"),
    (1000, rss_ratio, "<= 0.25x boardgame.io server memory", lambda v: v <= 0.25, "{:.2f}x"),
]:
    b, r = bgio.get(g), hub.get(f"g{g}")
    if not b or not r:
        continue
    v = ratio(r, b)
    each = [ratio(h[f"g{g}"], bb[g]) for h, bb, _ in rounds if h.get(f"g{g}") and bb.get(g)]
    each = f"; round by round {', '.join(fmt.format(x) for x in each)}" if len(each) > 1 else ""
    # What the transport alone reaches against the same boardgame.io run: no hub on that
    # stack can do better, so a floor short of the target says the target is out of reach
    # of any hub on it, on this machine, in this run.
    bound = ""
    if ratio is not rss_ratio:
        floors = [(server, ratio(f, b)) for (server, fg), f in sorted(floor.items()) if fg == g]
        if floors:
            bound = "; the floor alone: " + ", ".join(f"{server} {fmt.format(x)}" for server, x in floors)
    checks.append((f"{what} at G={g}", ok(v), fmt.format(v) + each + bound))
for what, ok, detail in checks:
    print(f"- [{'x' if ok else ' '}] {what}: {detail}")
