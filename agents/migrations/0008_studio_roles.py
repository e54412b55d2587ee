"""The Studio's roles (groups Viewer, Support, Ops, Builder) with their permissions: agents.roles."""

from django.db import migrations


def create_roles(apps, schema_editor):
    from agents import roles

    roles.ensure_roles(apps)


class Migration(migrations.Migration):

    dependencies = [
        ("agents", "0007_agentversion_based_on"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("contenttypes", "0002_remove_content_type_name"),
        ("connectors", "0006_suppression_lift_permission"),
        ("runs", "0012_escalation_kinds_approval_and_handoff"),
        ("simulator", "0001_initial"),
    ]

    # Reversing leaves the groups: they may have members.
    operations = [migrations.RunPython(create_roles, migrations.RunPython.noop)]
