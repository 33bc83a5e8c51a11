"""`python -m bench [--quick] [--soak MINUTES] [--out FILE] [--no-peers]` (what `make bench` runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .run import RESULTS, STAGES, Plan, main

parser = argparse.ArgumentParser(
    prog="python -m bench",
    description=(
        "Measure trunkline against a direct httpx client (the floor) and the LiteLLM SDK and proxy, "
        "all calling one fake upstream, and write a Markdown report."
    ),
)
parser.add_argument("--quick", action="store_true", help="seconds-long run with tiny counts: checks every path")
parser.add_argument(
    "--soak",
    type=float,
    metavar="MINUTES",
    help="length of the memory soak (default: 10 in a full run, 5 seconds with --quick)",
)
parser.add_argument("--out", type=Path, default=RESULTS / "latest.md", help="the report (default: %(default)s)")
parser.add_argument("--no-peers", action="store_true", help="skip LiteLLM even when bench/.venv has it")
parser.add_argument(
    "--only",
    metavar="STAGES",
    default="",
    help=f"comma-separated stages to run, of {', '.join(STAGES)} (default: all; for iterating, "
    "not for the report of record)",
)
args = parser.parse_args()
only = frozenset(s for s in args.only.split(",") if s)
if only - set(STAGES):
    parser.error(f"--only: unknown stage(s) {', '.join(sorted(only - set(STAGES)))}; known: {', '.join(STAGES)}")
plan = Plan.quick() if args.quick else Plan.full()
if args.soak is not None:
    plan.soak_minutes = args.soak
sys.exit(main(plan, args.out.resolve(), peers=not args.no_peers, only=only))
