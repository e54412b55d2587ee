"""The sandbox's idem key keeps its unique index (each send is stored once: ON CONFLICT (idem_key)) but loses the
pattern index Django adds beside it for LIKE, which nothing runs: one index fewer to write on every sandbox send
(every send of a simulation, or of a sandbox organization). As runs 0017 for the outbox's idem key."""

from django.db import migrations


class Migration(migrations.Migration):
    atomic = False  # CONCURRENTLY: sandbox sends go on meanwhile

    dependencies = [
        ('connectors', '0008_covered_foreign_key_indexes'),
    ]

    operations = [
        migrations.RunSQL(
            'DROP INDEX CONCURRENTLY IF EXISTS "connectors_sandboxmessage_idem_key_d342e5e7_like"',
            reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "connectors_sandboxmessage_idem_key_d342e5e7_like"'
                        ' ON "connectors_sandboxmessage" ("idem_key" varchar_pattern_ops)',
        ),
    ]
