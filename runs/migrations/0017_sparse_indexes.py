"""Indexes that every update of a run or an outbox row wrote for nothing.

An update that changes an indexed column (a run's status or next wake, an outbox row's status: nearly every one
on the hot path) writes an entry into every index of the table, and each statement that writes the table opens
them all. The run's organization is found through run_org_status, which leads with it; the people and API keys
that started or cancelled a run, and a notice's escalation, are mostly NULL, so their indexes now hold only the
rows that have one (a row that does not meet an index's condition writes nothing into it); the idem key's
pattern index served no LIKE (the admin's search is a contains, which no b-tree serves). As 0015, the foreign
keys stay as they are: only indexes change. Not one transaction: the new indexes are built and the old ones dropped
CONCURRENTLY, the new first (a foreign key is never without its index), so workers keep claiming, fencing and
writing the outbox meanwhile.
"""

import django.db.models.deletion
from django.conf import settings
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ('agents', '0008_studio_roles'),
        ('runs', '0016_run_plan_hash'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        AddIndexConcurrently(
            model_name='outboxmessage',
            index=models.Index(condition=models.Q(('escalation__isnull', False)), fields=['escalation'], name='outbox_escalation'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('started_by__isnull', False)), fields=['started_by'], name='run_started_by'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('started_by_key__isnull', False)), fields=['started_by_key'], name='run_started_by_key'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('cancelled_by__isnull', False)), fields=['cancelled_by'], name='run_cancelled_by'),
        ),
        AddIndexConcurrently(
            model_name='run',
            index=models.Index(condition=models.Q(('cancelled_by_key__isnull', False)), fields=['cancelled_by_key'], name='run_cancelled_by_key'),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_outboxmessage_escalation_id_b7bedca0"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_outboxmessage_escalation_id_b7bedca0" ON "runs_outboxmessage" ("escalation_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_run_cancelled_by_id_26872eaf"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_run_cancelled_by_id_26872eaf" ON "runs_run" ("cancelled_by_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_run_cancelled_by_key_id_193b2fec"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_run_cancelled_by_key_id_193b2fec" ON "runs_run" ("cancelled_by_key_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_run_organization_id_f8dd9ba6"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_run_organization_id_f8dd9ba6" ON "runs_run" ("organization_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_run_started_by_id_a07a0b28"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_run_started_by_id_a07a0b28" ON "runs_run" ("started_by_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_run_started_by_key_id_4f554013"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_run_started_by_key_id_4f554013" ON "runs_run" ("started_by_key_id")',
                ),
                migrations.RunSQL(
                    'DROP INDEX CONCURRENTLY IF EXISTS "runs_outboxmessage_idem_key_2d7cbe7b_like"',
                    reverse_sql='CREATE INDEX CONCURRENTLY IF NOT EXISTS "runs_outboxmessage_idem_key_2d7cbe7b_like"'
                                ' ON "runs_outboxmessage" ("idem_key" varchar_pattern_ops)',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='outboxmessage',
                    name='escalation',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='notices', to='runs.escalation'),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='cancelled_by',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='cancelled_by_key',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='agents.apikey'),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='organization',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.PROTECT, related_name='runs', to='agents.organization'),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='started_by',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to=settings.AUTH_USER_MODEL),
                ),
                migrations.AlterField(
                    model_name='run',
                    name='started_by_key',
                    field=models.ForeignKey(blank=True, db_index=False, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='agents.apikey'),
                ),
            ],
        ),
    ]
