"""A scorecard as rows: each stated expectation with its own result, other reasons kept apart."""

import pytest
from django.conf import settings

from agents import versions
from simulator import case_table
from tests.factories import AgentFactory, scorecard_for

pytestmark = pytest.mark.django_db

COLLECTOR = (settings.BASE_DIR / "fixtures" / "agents" / "document-collector.yaml").read_text()


def test_each_stated_expectation_gets_its_own_result_and_a_crash_leaves_them_unchecked():
    draft = versions.create_draft(AgentFactory(organization=None, slug="document-collector"), source=COLLECTOR)
    cases = [
        {"name": "replies-with-pdf-after-3-days", "kind": "golden", "passed": False, "metrics": {}, "run_id": None,
         "reasons": ["max_messages: 4 message(s) sent, expected at most 3"]},
        {"name": "silent-vendor-escalates", "kind": "golden", "passed": False, "metrics": {}, "run_id": None,
         "reasons": ["simulation error: RuntimeError: boom"]},
    ]

    first, second = case_table.rows_for(scorecard_for(draft, passed=False, cases=cases))

    results = {expectation.key: (expectation.expected, expectation.passed, expectation.reason)
               for expectation in first.expectations}
    assert results["max_messages"] == ("3", False, "4 message(s) sent, expected at most 3")
    assert results["tasks_done_by_day"] == ("7", True, "")
    assert results["escalated"] == ("false", True, "")
    assert "open_tasks" not in results and "uses_channels" not in results  # unset checks are not shown
    assert first.other_reasons == []
    assert second.other_reasons == ["simulation error: RuntimeError: boom"]
    assert second.expectations and all(expectation.passed is None for expectation in second.expectations)
