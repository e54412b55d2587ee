"""A run's rows copied in SQL to new runs, for `manage.py bench`: the burst's sleeping runs (simulator.bench_burst)
and the throughput part's history (simulator.bench_history).

Each copy writes the template's columns (`columns`) but for those given as SQL expressions (`overrides`), which
may name the copy's run id as `copy.id` and the template's row as `t`. Only the bench's throwaway database ever
sees these statements.
"""

from __future__ import annotations

from runs.models import Episode, Run


def columns(model, *, skip: set[str]) -> list[str]:
    """The columns a copy writes: the model's own but for `skip` and those the database computes (generated)."""
    return [field.column for field in model._meta.concrete_fields
            if field.column not in skip and not field.generated]


def addresses(name: str, *, phone_prefix: str) -> dict[str, str]:
    """A contact's addresses of the copy's own (`name` and the run id), so that caps and suppressions see
    different people."""
    return {
        "email": f"'{name}' || copy.id || '@bench.example'",
        "phone": f"'{phone_prefix}' || lpad((copy.id %% 10000000)::text, 7, '0')",
        "slack_user": f"'U{name.upper()}' || copy.id",
    }


def copy_runs(cursor, template_id: int, *, count: int, overrides: dict[str, str] | None = None) -> list[int]:
    """`count` copies of the run row `template_id`; their ids."""
    names = columns(Run, skip={"id"})
    values = [(overrides or {}).get(name, name) for name in names]
    cursor.execute(
        f"INSERT INTO {Run._meta.db_table} ({', '.join(names)}) "  # noqa: S608 - the model's own columns
        f"SELECT {', '.join(values)} FROM {Run._meta.db_table}, generate_series(1, %s) WHERE id = %s RETURNING id",
        [count, template_id])
    return [row[0] for row in cursor.fetchall()]


def copy_run_rows(cursor, model, template_id: int, run_ids: list[int], *, overrides: dict[str, str] | None = None,
                  where: str = "", by_episode: bool = False) -> int:
    """`model`'s rows of run `template_id` (those `where` keeps) copied to each of `run_ids`; how many were written.
    `by_episode`: each row points at its copy's episode of the same seq (the episodes copied first)."""
    skip = {"id", "run_id", "episode_id"} if by_episode else {"id", "run_id"}
    names = columns(model, skip=skip)
    values = [(overrides or {}).get(name, f"t.{name}") for name in names]
    table, episodes = model._meta.db_table, Episode._meta.db_table
    episode_column = episode_value = episode_join = ""
    if by_episode:  # a row of no episode (a journal entry written between episodes) stays one in the copy
        episode_column, episode_value = "episode_id, ", "mine.id, "
        episode_join = (f" LEFT JOIN {episodes} theirs ON theirs.id = t.episode_id"
                        f" LEFT JOIN {episodes} mine ON mine.run_id = copy.id AND mine.seq = theirs.seq")
    cursor.execute(
        f"INSERT INTO {table} (run_id, {episode_column}{', '.join(names)}) "  # noqa: S608 - the model's own columns
        f"SELECT copy.id, {episode_value}{', '.join(values)} "
        f"FROM {table} t CROSS JOIN unnest(%s::bigint[]) AS copy(id){episode_join} "
        f"WHERE t.run_id = %s{where}", [run_ids, template_id])
    return cursor.rowcount
