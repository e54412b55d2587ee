from rest_framework import serializers

from runs.models import Contact, Episode, Escalation, EscalationStatus, Run, RunStatus, Task


class ContactSerializer(serializers.ModelSerializer):
    class Meta:
        model = Contact
        fields = ["role", "name", "email", "phone", "slack_user", "timezone"]


class TaskSerializer(serializers.ModelSerializer):
    class Meta:
        model = Task
        fields = ["key", "title", "required", "status", "done_evidence", "done_at"]


class RunSerializer(serializers.ModelSerializer):
    agent = serializers.CharField(source="version.agent.slug", read_only=True)
    version = serializers.IntegerField(source="version.number", read_only=True)
    contacts = ContactSerializer(many=True, read_only=True)
    tasks = TaskSerializer(many=True, read_only=True)
    usage = serializers.SerializerMethodField()

    class Meta:
        model = Run
        fields = ["id", "agent", "version", "sim", "external_ref", "goal", "inputs", "status", "wake_when",
                  "next_wake_at", "outcome", "contacts", "tasks", "usage", "created_at", "ended_at"]

    def get_usage(self, run: Run) -> dict:
        return {
            "steps": {"used": run.steps_used, "budget": run.step_budget},
            "tokens": {"used": run.tokens_used, "budget": run.token_budget},
            "cost_usd": {"used": str(run.cost_used), "budget": str(run.cost_budget)},
        }


class StartContactSerializer(serializers.Serializer):
    role = serializers.CharField()
    name = serializers.CharField(required=False, allow_blank=True)
    email = serializers.CharField(required=False, allow_blank=True)
    phone = serializers.CharField(required=False, allow_blank=True)
    slack_user = serializers.CharField(required=False, allow_blank=True)
    timezone = serializers.CharField(required=False, allow_blank=True)


class StartRunSerializer(serializers.Serializer):
    agent = serializers.SlugField(help_text="Started through the organization's active deployment of this agent.")
    version = serializers.IntegerField(required=False, min_value=1,
                                       help_text="An explicit published version number instead.")
    goal = serializers.CharField()
    contacts = StartContactSerializer(many=True)
    inputs = serializers.DictField(required=False, default=dict)
    external_ref = serializers.CharField(required=False, allow_blank=True, default="")


class EventSerializer(serializers.Serializer):
    dedupe_key = serializers.CharField(max_length=200, help_text="Sending the same key twice records one event.")
    kind = serializers.ChoiceField(choices=["event", "inbound"], default="event")
    channel = serializers.CharField(required=False, allow_blank=True, default="")
    text = serializers.CharField(required=False, allow_blank=True, default="")
    attachments = serializers.ListField(child=serializers.DictField(), required=False, default=list)
    data = serializers.DictField(required=False, default=dict)


class EpisodeSerializer(serializers.ModelSerializer):
    class Meta:
        model = Episode
        fields = ["id", "seq", "kind", "status", "due_at", "dedupe_key", "attempts"]


class TimelineItemSerializer(serializers.Serializer):
    at = serializers.DateTimeField()
    type = serializers.CharField()
    kind = serializers.CharField()
    summary = serializers.CharField()
    ref = serializers.IntegerField()
    channel = serializers.CharField()
    direction = serializers.CharField()


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class EscalationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Escalation
        fields = ["id", "run", "kind", "prompt", "options", "context", "status", "answer", "answered_via",
                  "raised_at", "created_at", "answered_at"]


class AnswerSerializer(serializers.Serializer):
    answer = serializers.CharField()


class ResolveSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["sent", "not_sent"])


RUN_STATUSES = [choice for choice, _ in RunStatus.choices]
ESCALATION_STATUSES = [choice for choice, _ in EscalationStatus.choices]
