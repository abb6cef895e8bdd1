"""``worker demo`` (what ``make run`` runs): the stage on a local moto server, with a demo
matter. The demo itself (:mod:`worker.cli.demo_matter`) is imported when it runs."""

from __future__ import annotations

import argparse


def add_parser(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    demo = commands.add_parser("demo", help="the stage on a local moto server, with a demo matter")
    demo.add_argument("--once", action="store_true", help="stop after the first prompt and fold")
    demo.set_defaults(execute=run_demo_command)


def run_demo_command(args: argparse.Namespace) -> int:
    from worker.cli.demo_matter import run_demo

    return run_demo(once=args.once)
