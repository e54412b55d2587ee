from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('runs', '0013_escalation_assignee'),
    ]

    operations = [
        migrations.AddField(
            model_name='run',
            name='journal_seq',
            field=models.PositiveIntegerField(db_default=0, editable=False),
        ),
        migrations.RunSQL(
            "UPDATE runs_run r SET journal_seq = j.last"
            " FROM (SELECT run_id, max(seq) AS last FROM runs_journalentry GROUP BY run_id) j WHERE j.run_id = r.id",
            reverse_sql=migrations.RunSQL.noop,
        ),
    ]
