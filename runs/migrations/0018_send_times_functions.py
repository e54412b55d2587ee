"""What per-contact caps count, as two SQL functions (runs.compliance): `lucia_send_times`, when an organization's
real runs sent (or may have sent) to one address in a span, and `lucia_send_times_locked`, the same read under the
address's lock.

The locked one takes a transaction-level advisory lock on the address and only then reads the sends. It is VOLATILE
and written in PL/pgSQL, so in READ COMMITTED its query takes a snapshot of its own after the lock is granted: it
sees every send a previous holder of the lock committed. So the statement that records a send can take the lock and
count the caps itself (runs.compliance.recount), where a statement's own sub-select would read the snapshot taken
when the statement began, before it waited.

The sends are found by recipient (outbox_recipient_time), the run's organization checked per row found, as
runs.episode_loads.CAPS_SQL finds them: as a join with runs_run, a generic plan could read every run of the
organization instead (PL/pgSQL keeps its queries' plans for the connection's life).
"""

from django.db import migrations

FUNCTIONS = """
CREATE FUNCTION lucia_send_times(p_recipient text, p_organization bigint, p_since timestamptz,
                                 p_until timestamptz) RETURNS SETOF timestamptz
LANGUAGE sql STABLE AS $$
    SELECT coalesce(m.sent_at, m.created_at) FROM runs_outboxmessage m
     WHERE m.recipient = p_recipient AND m.status IN ('sending', 'sent', 'uncertain')
       AND (SELECT r.organization_id = p_organization AND NOT r.sim FROM runs_run r WHERE r.id = m.run_id)
       AND ((m.created_at > p_since AND m.created_at <= p_until) OR (m.sent_at > p_since AND m.sent_at <= p_until))
$$;

CREATE FUNCTION lucia_send_times_locked(p_lock text, p_recipient text, p_organization bigint, p_since timestamptz,
                                        p_until timestamptz) RETURNS timestamptz[]
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
    PERFORM pg_advisory_xact_lock(hashtext(p_lock));
    RETURN ARRAY(SELECT t FROM lucia_send_times(p_recipient, p_organization, p_since, p_until) AS t ORDER BY t);
END
$$;
"""

DROP = """
DROP FUNCTION lucia_send_times_locked(text, text, bigint, timestamptz, timestamptz);
DROP FUNCTION lucia_send_times(text, bigint, timestamptz, timestamptz);
"""


class Migration(migrations.Migration):
    dependencies = [
        ('runs', '0017_sparse_indexes'),
    ]

    operations = [
        migrations.RunSQL(FUNCTIONS, reverse_sql=DROP),
    ]
