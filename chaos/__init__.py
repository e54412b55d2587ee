"""`make chaos`: the project's own chaos run, through real `manage.py` worker processes.

`python -m chaos` starts a private PostgreSQL in a temporary directory (never
the machine's shared server: it restarts this one), migrates it, starts runs of
a fast-ladder agent (chaos/agent.yaml) that chases contacts by SMS through a
local Twilio fake and by email through a sandbox identity, and launches the
worker command (`manage.py runworkers` when the checkout has it, else
`manage.py qcluster`) as separate process groups. While the runs climb their
ladders it injects faults (see chaos.schedule), then lets everything settle
and checks invariants in SQL and at the fake provider (chaos.invariants).

A tool at the edge: it imports the runtime, the runtime never imports it.
"""
