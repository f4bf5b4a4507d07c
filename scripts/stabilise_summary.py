#!/usr/bin/python3
"""Markdown tables from the output of `viewfinder-report --stabilise-motions` (the README's).

Usage: scripts/stabilise_summary.py OUTPUT.txt [--per-motion] [--per-photo]   (both by default)

Reads the per-sequence lines the report prints ("<motion>: input … | look-ahead 15 x % y dB; …;
vidstab … ; deshake … | ours from truth: L0 a % L15 b % … | showing the intended motion exactly:
c %") and prints, for the look-ahead values the run had:
  per motion: the mean over the photographs of the exact measure at each look-ahead (and the
              worst), the intended motion's own figure, ours registered at 15 and the peers;
  per photo:  the mean over the motions, how many of them are within 8 %, and the same for the
              registered measures.
Only the standard library; the figures are the report's, averaged, nothing else.
"""
import re
import sys


def parse(path):
    photos, photo = {}, None
    for line in open(path, encoding="utf-8"):
        m = re.match(r"^  (\S+) \((\S+)\)$", line.rstrip("\n"))
        if m:
            photo = m.group(1)
            photos[photo] = []
            continue
        if photo is None or "ours from truth:" not in line:
            continue
        head, rest = line.split("|", 1)
        motion = head.strip().split(": input")[0]
        measured, truth = rest.split("ours from truth:", 1)
        registered = {int(a): float(b) for a, b in re.findall(r"look-ahead (\d+) ([\d.]+) %", measured)}
        vidstab = re.search(r"smoothing 15\) ([\d.]+) %", measured)
        deshake = re.search(r"deshake ([\d.]+) %", measured)
        exact = {int(a): float(b) for a, b in re.findall(r"L(\d+) ([\d.]+) %", truth.split("|")[0])}
        floor = re.search(r"intended motion exactly: ([\d.]+) %", truth)
        photos[photo].append(dict(
            motion=motion, exact=exact, registered=registered,
            vidstab=float(vidstab.group(1)) if vidstab else None,
            deshake=float(deshake.group(1)) if deshake else None,
            floor=float(floor.group(1)) if floor else None))
    return photos


def mean(v):
    v = [x for x in v if x is not None]
    return sum(v) / len(v) if v else None


def pct(x):
    return "—" if x is None else "%.1f %%" % x


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    photos = parse(sys.argv[1])
    if not photos:
        sys.exit("stabilise_summary: no sequences in %s" % sys.argv[1])
    rows = [r for rs in photos.values() for r in rs]
    lookaheads = sorted({k for r in rows for k in r["exact"]})
    want = [a for a in sys.argv[2:] if a.startswith("--")] or ["--per-motion", "--per-photo"]
    if "--per-motion" in want:
        motions = list(dict.fromkeys(r["motion"] for r in rows))
        print("| motion | " + " | ".join("exact, look-ahead %d (worst)" % a for a in lookaheads)
              + " | intended motion shown exactly | registered, 15 | vidstab | deshake |")
        print("|---" * (len(lookaheads) + 5) + "|")
        for m in motions:
            rs = [r for r in rows if r["motion"] == m]
            cells = ["%.1f %% (%.1f)" % (mean([r["exact"][a] for r in rs]), max(r["exact"][a] for r in rs))
                     for a in lookaheads]
            cells += [pct(mean([r["floor"] for r in rs])), pct(mean([r["registered"].get(15) for r in rs])),
                      pct(mean([r["vidstab"] for r in rs])), pct(mean([r["deshake"] for r in rs]))]
            print("| %s | %s |" % (m, " | ".join(cells)))
        print()
        for a in lookaheads:
            v = [r["exact"][a] for r in rows]
            print("- all sequences, exact, look-ahead %d: mean %.1f %%, worst %.1f %%, within 8 %%: %d of %d"
                  % (a, mean(v), max(v), sum(x <= 8 for x in v), len(v)))
        print()
    if "--per-photo" in want:
        print("| photograph | " + " | ".join("exact, look-ahead %d (within 8 %%)" % a for a in lookaheads)
              + " | registered, 15 | vidstab | deshake |")
        print("|---" * (len(lookaheads) + 4) + "|")
        for p, rs in photos.items():
            cells = ["%.1f %% (%d of %d)" % (mean([r["exact"][a] for r in rs]), sum(r["exact"][a] <= 8 for r in rs), len(rs))
                     for a in lookaheads]
            cells += [pct(mean([r["registered"].get(15) for r in rs])), pct(mean([r["vidstab"] for r in rs])),
                      pct(mean([r["deshake"] for r in rs]))]
            print("| %s | %s |" % (p, " | ".join(cells)))


if __name__ == "__main__":
    main()
