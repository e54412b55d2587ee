import base64
import binascii

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from connectors.attachments import Upload, max_bytes
from runs import answer_options
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


_NO_BYTES = ("the file's bytes are required: base64 in content_b64, or upload it as multipart `files`; "
             "a description of a file is not a file")


class EventAttachmentSerializer(serializers.Serializer):
    filename = serializers.CharField(max_length=255, help_text="Checked against the task's filename pattern.")
    content_type = serializers.CharField(
        max_length=255, required=False, allow_blank=True, default="",
        help_text="Optional; the type is read from the bytes, and a declared type they contradict is a 400.")
    content_b64 = serializers.CharField(
        allow_blank=True, trim_whitespace=False, error_messages={"required": _NO_BYTES, "null": _NO_BYTES},
        help_text="The file's bytes, base64-encoded. Required: only stored bytes count as evidence.")

    def validate_content_b64(self, value: str) -> bytes:
        try:
            return base64.b64decode(value, validate=True)
        except (binascii.Error, ValueError):
            raise serializers.ValidationError("not valid base64") from None

    def to_upload(self, data: dict) -> Upload:
        return Upload(filename=data["filename"], content=data["content_b64"],
                                  declared_type=data["content_type"])


@extend_schema_field(OpenApiTypes.BINARY)
class _UploadField(serializers.FileField):
    """A multipart file part (documented as binary: it is only ever uploaded, never returned)."""


EVENT_KINDS = ["event", "inbound"]


class _EventFields(serializers.Serializer):
    dedupe_key = serializers.CharField(max_length=200, help_text="Sending the same key twice records one event.")
    kind = serializers.ChoiceField(
        choices=EVENT_KINDS, default="event",
        help_text="`inbound`: a message from a contact (evidence for their tasks); `event`: anything else.")
    sender = serializers.CharField(
        max_length=254, required=False, allow_blank=True, default="",
        help_text="Who sent it: the email address, phone number or Slack user id of one of the run's contacts. "
                  "Required for `inbound` events and for events with files; anyone else is a 400.")
    channel = serializers.CharField(max_length=16, required=False, allow_blank=True, default="",
                                    help_text="email, sms, voice or slack: how the sender's address is read.")
    text = serializers.CharField(required=False, allow_blank=True, default="")


class EventSerializer(_EventFields):
    """An event as JSON; files as base64 content."""

    attachments = EventAttachmentSerializer(
        many=True, required=False, default=list,
        help_text="Files with their bytes. A file without bytes, empty, over the size limit or whose bytes "
                  "contradict its declared type is a 400.")
    data = serializers.DictField(required=False, default=dict)

    def uploads(self) -> list[Upload]:
        return [EventAttachmentSerializer().to_upload(item) for item in self.validated_data["attachments"]]


class EventUploadSerializer(_EventFields):
    """An event as multipart/form-data; files uploaded as `files` parts."""

    files = serializers.ListField(child=_UploadField(), required=False, default=list,
                                  help_text="The files, each a multipart part named `files`.")

    def uploads(self) -> list[Upload]:
        limit = max_bytes()
        # One byte past the limit is enough to refuse it; the rest is never read into memory.
        return [Upload(filename=upload.name or "", content=upload.read(limit + 1),
                                   declared_type=upload.content_type or "")
                for upload in self.validated_data["files"]]


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
    episode = serializers.IntegerField(allow_null=True, help_text="The id of the episode it happened in, if any.")
    detail = serializers.CharField(help_text="The whole of it as readable lines (a tool call's arguments).")


class CancelSerializer(serializers.Serializer):
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class EscalationSerializer(serializers.ModelSerializer):
    class Meta:
        model = Escalation
        fields = ["id", "run", "kind", "prompt", "options", "context", "status", "answer", "answered_via",
                  "raised_at", "created_at", "answered_at"]


class OptionField(serializers.ChoiceField):
    """The option's name; documented as the enum of registered options, refused by runs.answers (which names
    the options that fit the escalation) rather than here."""

    def to_internal_value(self, data: object) -> str:
        if not isinstance(data, str):
            self.fail("invalid_choice", input=data)
        return data


class AnswerSerializer(serializers.Serializer):
    option = OptionField(choices=[], required=False, allow_blank=True)
    text = serializers.CharField(required=False, allow_blank=True, default="", max_length=10_000)
    data = serializers.DictField(required=False, default=dict)

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        # Read when built, not at import: every registered option is in (runs.answer_options).
        registered = answer_options.all_options()
        self.fields["option"].choices = [(option.name, option.label) for option in registered]
        self.fields["option"].help_text = "What the answer does; only the options listed on the escalation fit. " + \
            " ".join(f"`{option.name}` ({', '.join(sorted(option.kinds))}): {option.description or option.label}"
                     + (f" data: {option.data}." if option.data else "") for option in registered)


class AnswerRefusedSerializer(serializers.Serializer):
    """The option's refusal ({detail}, with a preview for a reply to confirm), or field errors ({text: [...]})."""

    detail = serializers.CharField(required=False, help_text="Why the option refused the answer.")
    preview = serializers.DictField(required=False, help_text="reply_to_contact: what would be sent.")


class ResolveSerializer(serializers.Serializer):
    outcome = serializers.ChoiceField(choices=["sent", "not_sent"])


RUN_STATUSES = [choice for choice, _ in RunStatus.choices]
ESCALATION_STATUSES = [choice for choice, _ in EscalationStatus.choices]
