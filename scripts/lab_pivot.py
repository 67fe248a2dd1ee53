#!/usr/bin/env python3
"""The lab's accuracy records laid out as the seeds' tables (models as rows, methods as columns).

`stretch report` prints one row per (model, method); Su Jianlin's posts print one row per model
and one column per inference-time method, each cell "repeat / non-repeat" at one test length.
This prints that layout, in Markdown, from the same records:

    python3 scripts/lab_pivot.py lab/results*.jsonl --factor 8 \
        --methods direct,ntk,yarn,rerope --models rope,rope-logn,...

Only the Python standard library; the numbers are the records' own (nothing is recomputed).
The first record of each key wins, as in `stretch report`.
"""
import argparse
import gzip
import json
import sys


def read_records(paths, period):
    seen = {}
    for path in paths:
        opener = gzip.open if path.endswith(".gz") else open
        with opener(path, "rt", encoding="utf-8") as f:
            for line in f:
                line = line.strip()
                if not line:
                    continue
                try:
                    r = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a line cut by a kill, as `stretch report` skips it
                if r.get("record") != "cell" or r.get("tail", 0) or r.get("stride", 0):
                    continue
                if r.get("protocol") not in ("repeat", "nonrepeat"):
                    continue
                # The seeds' repeat (a sample of L tokens repeated) has no period field; the
                # retrieval protocol's longer periods do, and are another table (--period).
                if r["protocol"] == "repeat" and r.get("period") != period:
                    continue
                key = (r["corpus"], r["model"], r["method"], r["protocol"], r["ctx"])
                seen.setdefault(key, r)
    return seen


def pct(r, ci=False):
    if r is None:
        return "-"
    if ci and r.get("accuracy_ci"):
        lo, hi = r["accuracy_ci"]
        return f"{100 * r['accuracy']:.1f}% ({100 * lo:.1f}-{100 * hi:.1f})"
    return f"{100 * r['accuracy']:.2f}%"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("files", nargs="+", help="results*.jsonl of a lab folder")
    ap.add_argument("--factor", type=int, default=8, help="test length as a multiple of L")
    ap.add_argument("--methods", default="direct,ntk,yarn,rerope",
                    help="comma list of the lab's method names, one column each")
    ap.add_argument("--models", default="", help="comma list of models (default: all, as read)")
    ap.add_argument("--train-column", action="store_true",
                    help="first column: non-repeat accuracy at the training length (direct)")
    ap.add_argument("--period", type=int, default=None,
                    help="repeat cells of the retrieval protocol with this period (default: the "
                         "seeds' repeat, a sample of L tokens)")
    ap.add_argument("--ci", action="store_true",
                    help="each accuracy with its 95%% interval from the records")
    a = ap.parse_args()
    recs = read_records(a.files, a.period)
    if not recs:
        sys.exit("lab_pivot: no repeat/non-repeat records in " + ", ".join(a.files))
    models = []
    for (corpus, model, _, _, _) in recs:
        if model not in models:
            models.append(model)
    if a.models:
        models = [m for m in a.models.split(",") if m]
    methods = [m for m in a.methods.split(",") if m]
    corpora = sorted({k[0] for k in recs})
    for corpus in corpora:
        def get(model, method, protocol, ctx):
            return recs.get((corpus, model, method, protocol, ctx))

        lens = {r["train_len"] for k, r in recs.items() if k[0] == corpus}
        if len(lens) != 1:
            sys.exit(f"lab_pivot: {corpus}: several training lengths {sorted(lens)}")
        L = lens.pop()
        ctx = L * a.factor
        head = ["model"]
        if a.train_column:
            head.append(f"L={L}")
        rep = "repeat" if a.period is None else f"repeat (period {a.period})"
        head += [f"{m}: {rep} / non-repeat {ctx}" for m in methods]
        print(f"corpus {corpus}, {ctx} tokens ({a.factor}x L)\n")
        print("| " + " | ".join(head) + " |")
        print("| --- |" + " ---: |" * (len(head) - 1))
        for model in models:
            row = [model]
            if a.train_column:
                row.append(pct(get(model, "direct", "nonrepeat", L), a.ci))
            for m in methods:
                rep, non = get(model, m, "repeat", ctx), get(model, m, "nonrepeat", ctx)
                row.append("-" if rep is None and non is None else f"{pct(rep, a.ci)} / {pct(non, a.ci)}")
            print("| " + " | ".join(row) + " |")
        print()


if __name__ == "__main__":
    main()
