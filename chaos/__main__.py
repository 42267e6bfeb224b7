"""``python -m chaos``: run the chaos harness and print its figures.

Examples::

    python -m chaos --seed 7 --duration 60 --store file
    python -m chaos --seed 7 --duration 720 --store file --store s3 --write-docs

Exit status 0 when every check passed, 1 when one failed, 2 for bad options.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from chaos.nemesis import ALL_KINDS, KINDS, SEGMENT_KINDS
from chaos.report import text, write_docs
from chaos.run import Options, Outcome, recheck, run

DOCS = Path(__file__).resolve().parents[1] / "docs" / "reliability.md"


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__.splitlines()[0])
    parser.add_argument("--seed", type=int, default=1, help="seeds the nemesis and the clients (default 1)")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds of faults per store (default 60)")
    parser.add_argument("--store", action="append", choices=("file", "s3", "gcs", "azure"),
                        help="the store to run on; repeat for both (default file)")
    parser.add_argument("--nodes", type=int, default=3, help="daphne nodes (default 3)")
    parser.add_argument("--producers", type=int, default=2)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--pace", type=float, default=0.08, help="mean seconds between one producer's pushes")
    parser.add_argument("--faults", type=int, default=None, help="stop after this many faults")
    parser.add_argument("--each", action="store_true", help="every fault kind in turn instead of drawn by weight")
    parser.add_argument("--kinds", default=None,
                        help=f"fault kinds among {','.join(ALL_KINDS)} (default {','.join(KINDS)}, and "
                             f"{','.join(SEGMENT_KINDS)} with --segments)")
    parser.add_argument("--odd-strings", type=float, default=0.005,
                        help="chance that a claim carries a lone surrogate in its worker name (x10 for a fail's "
                             "error; default 0.005)")
    parser.add_argument("--deep-payloads", type=float, default=0.005,
                        help="chance that a push carries a payload nested close to JSON's depth limit (default 0.005)")
    parser.add_argument("--drop-answer", type=float, default=0.02,
                        help="chance that a client drops an answer it got and retries (default 0.02)")
    parser.add_argument("--delayed", type=float, default=0.05,
                        help="chance that a push is delayed by 0.5-4 s; none is leased before it is due "
                             "(default 0.05)")
    parser.add_argument("--watches", type=float, default=0.03,
                        help="chance that a worker works a job for 0.5-5 s with a lease watch open "
                             "(POST /api/v1/leases/watch) instead of heartbeating, and sends its result even when "
                             "told the lease is lost; that result must be refused (default 0.03)")
    parser.add_argument("--no-purges", dest="purges", action="store_false",
                        help="no operator purging waiting jobs by id through /api/v1/operator (chaos.purger)")
    parser.add_argument("--no-requeues", dest="requeues", action="store_false",
                        help="no operator requeueing running jobs and redriving dead letters, some at a pace, "
                             "through /api/v1/operator (chaos.requeuer)")
    parser.add_argument("--no-limits", dest="limits", action="store_false",
                        help="no operator setting the chaos queue's concurrency limit through /api/v1/operator "
                             "(chaos.pauser)")
    parser.add_argument("--no-rates", dest="rates", action="store_false",
                        help="no operator setting the chaos queue's rate limit through /api/v1/operator "
                             "(chaos.pauser)")
    parser.add_argument("--no-schedule-pauses", dest="schedule_pauses", action="store_false",
                        help="no operator pausing and resuming the nodes' schedule through /api/v1/operator "
                             "(chaos.pauser)")
    parser.add_argument("--segments", default=None, metavar="SEGMENT,HEAD,REFILL",
                        help="run format 2 with these QUEUE_SEGMENT_JOBS, QUEUE_HEAD_JOBS and QUEUE_REFILL_BELOW "
                             "(e.g. 5,10,5: small, so that sealing and refilling happen all the time), and add the "
                             "segment fault; default: the app's own settings")
    parser.add_argument("--delayed-horizon", type=float, default=0.3, metavar="SECONDS",
                        help="with --segments: QUEUE_DELAYED_HORIZON_SECONDS, delayed jobs due further ahead go to "
                             "delayed segments (format 3); short, so the delays above are sealed (default 0.3; "
                             "0: never)")
    parser.add_argument("--workdir", type=Path, default=None, help="keep logs and history here")
    parser.add_argument("--write-docs", action="store_true", help=f"write the figures to {DOCS}")
    parser.add_argument("--recheck", type=Path, action="append", default=[], metavar="WORKDIR",
                        help="start nothing: check the history a run left in WORKDIR/<store> again")
    args = parser.parse_args(argv)
    if args.kinds is None:
        args.kinds = ",".join(KINDS + (SEGMENT_KINDS if args.segments is not None else ()))
    args.kinds = [k for k in args.kinds.split(",") if k]
    if args.segments is not None:
        try:
            args.segments = tuple(int(n) for n in args.segments.split(","))
        except ValueError:
            args.segments = ()
        if len(args.segments) != 3 or min(args.segments) < 1:
            parser.error("--segments takes three positive integers: SEGMENT_JOBS,HEAD_JOBS,REFILL_BELOW")
    if set(args.kinds) - set(ALL_KINDS) or not args.kinds:
        parser.error(f"--kinds takes a comma-separated list of {', '.join(ALL_KINDS)}")
    if not 0 <= args.delayed_horizon < float("inf"):
        parser.error("--delayed-horizon is a number of seconds, 0 or more")
    if not 0 <= args.delayed <= 1:
        parser.error("--delayed is a chance, between 0 and 1")
    if not 0 <= args.watches <= 1:
        parser.error("--watches is a chance, between 0 and 1")
    if args.nodes < 2:
        parser.error("--nodes must be at least 2 (failover needs a standby)")
    for path in args.recheck:
        if not (path / "history.json").is_file():
            # --workdir W keeps each store's run in W/<store>: name that folder.
            runs = sorted(str(p.parent) for p in path.glob("*/history.json"))
            hint = f"; the runs in it: {', '.join(runs)}" if runs else ""
            parser.error(f"--recheck {path}: no history.json there (a run kept with --workdir W is in W/<store>){hint}")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse(argv)
    outcomes: list[Outcome] = [recheck(path) for path in args.recheck]
    for outcome in outcomes:
        print(text(outcome), flush=True)
    for store in [] if args.recheck else args.store or ["file"]:
        workdir = None if args.workdir is None else args.workdir / store
        options = Options(seed=args.seed, duration=args.duration, store=store, nodes=args.nodes,
                          producers=args.producers, workers=args.workers, pace=args.pace, kinds=args.kinds,
                          faults=args.faults, each=args.each, odd_strings=args.odd_strings,
                          deep_payloads=args.deep_payloads, drop_answer=args.drop_answer, delayed=args.delayed,
                          watches=args.watches, purges=args.purges, requeues=args.requeues,
                          schedule_pauses=args.schedule_pauses, limits=args.limits, rates=args.rates,
                          segments=args.segments, delayed_horizon=args.delayed_horizon, workdir=workdir,
                          command="python -m chaos " + shlex.join(argv))
        outcome = run(options)
        print(text(outcome), flush=True)
        outcomes.append(outcome)
    if args.write_docs:
        write_docs(outcomes, DOCS)
        print(f"wrote {DOCS}")
    return 0 if all(o.verdict.ok for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
