"""Drop the foreign-key indexes that a composite index already leads with.

Each episode writes several journal entries and episodes, and every row is an insert into every index of its
table: journal_unique_seq (run, seq), journal_replay (episode, request_hash) and episode_unique_seq (run, seq)
serve every lookup these served. Only the indexes go (the foreign keys stay, unvalidated again), so the
migration takes no long lock on a large table.
"""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0014_run_journal_seq'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_episode_run_id_e5e16b1d"',
                    reverse_sql='CREATE INDEX IF NOT EXISTS "runs_episode_run_id_e5e16b1d" ON "runs_episode" ("run_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_journalentry_episode_id_fbe3f9db"',
                    reverse_sql='CREATE INDEX IF NOT EXISTS "runs_journalentry_episode_id_fbe3f9db"'
                                ' ON "runs_journalentry" ("episode_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "runs_journalentry_run_id_8f3ae797"',
                    reverse_sql='CREATE INDEX IF NOT EXISTS "runs_journalentry_run_id_8f3ae797"'
                                ' ON "runs_journalentry" ("run_id")',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='episode',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='episodes', to='runs.run'),
                ),
                migrations.AlterField(
                    model_name='journalentry',
                    name='episode',
                    field=models.ForeignKey(blank=True, db_index=False, null=True,
                                            on_delete=django.db.models.deletion.CASCADE, related_name='journal',
                                            to='runs.episode'),
                ),
                migrations.AlterField(
                    model_name='journalentry',
                    name='run',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='journal', to='runs.run'),
                ),
            ],
        ),
    ]
