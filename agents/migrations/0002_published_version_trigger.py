"""A published or retired version's config cannot change, even through raw SQL.

The only updates allowed on such a row are the status moving forward
(published → retired) and its publishing metadata being set once.
"""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION agents_version_readonly() RETURNS trigger AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        IF OLD.status <> 'draft' THEN
            RAISE EXCEPTION 'agent version % is %, and cannot be deleted', OLD.id, OLD.status
                USING ERRCODE = 'integrity_constraint_violation';
        END IF;
        RETURN OLD;
    END IF;
    IF OLD.status <> 'draft' AND (
        NEW.source IS DISTINCT FROM OLD.source
        OR NEW.compiled IS DISTINCT FROM OLD.compiled
        OR NEW.config_hash IS DISTINCT FROM OLD.config_hash
        OR NEW.agent_id IS DISTINCT FROM OLD.agent_id
        OR NEW.number IS DISTINCT FROM OLD.number
        OR NEW.gate_scorecard IS DISTINCT FROM OLD.gate_scorecard
        OR NOT (NEW.status = OLD.status OR (OLD.status = 'published' AND NEW.status = 'retired'))
    ) THEN
        RAISE EXCEPTION 'agent version % is %, and read-only: create a new draft instead', OLD.id, OLD.status
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER agents_version_readonly
    BEFORE UPDATE OR DELETE ON agents_agentversion
    FOR EACH ROW EXECUTE FUNCTION agents_version_readonly();
"""

DROP = """
DROP TRIGGER IF EXISTS agents_version_readonly ON agents_agentversion;
DROP FUNCTION IF EXISTS agents_version_readonly();
"""


class Migration(migrations.Migration):
    dependencies = [("agents", "0001_initial")]

    operations = [migrations.RunSQL(CREATE, DROP)]
