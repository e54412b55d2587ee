"""Drop the sandbox messages' organization index: sandboxmsg_recipient_idx (organization, channel, recipient) leads
with it and serves every lookup it served. Only the index goes (the foreign key stays, unvalidated again)."""

import django.db.models.deletion
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0008_studio_roles'),
        ('connectors', '0007_inbound_triage_and_suppression_lifts'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    'DROP INDEX IF EXISTS "connectors_sandboxmessage_organization_id_ebbcb333"',
                    reverse_sql='CREATE INDEX IF NOT EXISTS "connectors_sandboxmessage_organization_id_ebbcb333"'
                                ' ON "connectors_sandboxmessage" ("organization_id")',
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name='sandboxmessage',
                    name='organization',
                    field=models.ForeignKey(db_index=False, on_delete=django.db.models.deletion.CASCADE,
                                            related_name='sandbox_messages', to='agents.organization'),
                ),
            ],
        ),
    ]
