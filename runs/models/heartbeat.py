from django.db import models


class ClusterHeartbeat(models.Model):
    """Progress of one worker cluster, on the database clock (written by runs.heartbeats only).

    A cluster is what one `runworkers` supervisor runs (a bare `qcluster` gets a row
    named after its host and process group). Workers stamp the start and the end of
    every task; the supervisor and `/healthz/` read the stamps to tell a cluster that
    works from one that is alive but stuck.
    """

    cluster = models.CharField(max_length=200, unique=True)
    host = models.CharField(max_length=200)
    # The qcluster process (and process group) currently running for this cluster.
    pid = models.IntegerField(null=True, blank=True)
    # When the current qcluster process was started (a fresh cluster is not stalled yet).
    started_at = models.DateTimeField()
    # When a worker of the current qcluster last came up (django-q2's post_spawn): the cluster has booted.
    ready_at = models.DateTimeField(null=True, blank=True)
    last_task_started_at = models.DateTimeField(null=True, blank=True)
    last_task_finished_at = models.DateTimeField(null=True, blank=True)
    # Tasks started minus tasks finished since started_at: a task in flight is progress, for a while.
    in_flight = models.IntegerField(default=0)
    restarts = models.PositiveIntegerField(default=0)
    last_restart_at = models.DateTimeField(null=True, blank=True)
    last_restart_reason = models.TextField(blank=True)

    class Meta:
        ordering = ["cluster"]

    def __str__(self) -> str:
        return self.cluster
