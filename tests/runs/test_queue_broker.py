"""The queue's broker (runs.queue_broker): the oldest waiting tasks first, each taken once, in one statement."""

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from django_q.brokers import get_broker
from django_q.conf import Conf
from django_q.models import OrmQ

from runs import queue_broker
from tests.commit_settings import left_by, statements_run, synchronous_commit
from tests.runs import lock_waits


@pytest.fixture
def broker(monkeypatch):
    monkeypatch.setattr(Conf, "POLL", 0)  # an empty queue returns at once
    broker = get_broker()
    assert isinstance(broker, queue_broker.SkipLockedORM)  # the cluster's broker (settings.Q_CLUSTER)
    return broker


@pytest.mark.django_db
def test_dequeue_takes_the_oldest_waiting_tasks_and_hands_them_out_again_only_after_retry(broker, monkeypatch):
    monkeypatch.setattr(Conf, "BULK", 2)
    ids = [broker.enqueue(f"task {index}") for index in range(3)]
    OrmQ.objects.create(key="another-cluster", payload="theirs", lock=timezone.now())

    with CaptureQueriesContext(connection) as queries:
        taken = broker.dequeue()
    assert len(queries) == 1
    assert taken == [(ids[0], "task 0"), (ids[1], "task 1")]
    lock = OrmQ.objects.get(pk=ids[0]).lock
    assert timedelta(seconds=Conf.RETRY - 5) < lock - timezone.now() <= timedelta(seconds=Conf.RETRY)

    assert broker.dequeue() == [(ids[2], "task 2")]  # the taken ones wait for their retry
    assert broker.dequeue() is None  # another cluster's task is not this one's

    OrmQ.objects.filter(pk=ids[0]).update(lock=timezone.now() - timedelta(seconds=1))  # its retry is due
    assert broker.dequeue() == [(ids[0], "task 0")]


@pytest.mark.django_db(transaction=True)
def test_a_task_being_taken_by_another_cluster_is_passed_over_not_waited_for(broker):
    first, second = broker.enqueue("task 0"), broker.enqueue("task 1")
    with lock_waits.row_lock_held(OrmQ, first):  # another cluster's pusher is taking it
        assert broker.dequeue() == [(second, "task 1")]
    assert broker.dequeue() == [(first, "task 0")]


def _bookkeeping(call) -> list[tuple[str, dict]]:
    """The statements taking or acknowledging tasks that `call` ran, with their parameters."""
    return statements_run(call, picked=lambda sql: sql in (queue_broker.DEQUEUE_SQL, queue_broker.ACKNOWLEDGE_SQL))


@pytest.mark.django_db(transaction=True)
def test_taking_and_acknowledging_a_task_in_their_own_transactions_commit_without_waiting_for_the_disk(broker):
    task, other = broker.enqueue("task 0"), broker.enqueue("task 1")

    [(take, take_params)] = _bookkeeping(broker.dequeue)  # the oldest (Q_CLUSTER["bulk"] is 1)
    [(ack, ack_params)] = _bookkeeping(lambda: broker.acknowledge(task))

    assert not OrmQ.objects.filter(pk=task).exists()
    assert synchronous_commit() == "on"  # for their own transactions only
    # What those statements left their transactions with: each run again on the other task (and rolled back).
    assert left_by(take, {**take_params, "now": timezone.now()}) == "off"
    assert left_by(ack, {**ack_params, "id": other}) == "off"


@pytest.mark.django_db
def test_taking_and_acknowledging_a_task_in_a_caller_s_transaction_leave_its_commit_as_the_caller_chose(broker):
    # The caller's transaction: the test's own (pytest-django's).
    task = broker.enqueue("task 0")
    assert broker.dequeue() == [(task, "task 0")]
    broker.acknowledge(task)

    assert synchronous_commit() == "on"
    assert not OrmQ.objects.filter(pk=task).exists()
