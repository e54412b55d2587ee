"""Shapes of agents, versions and deployments on the wire. Writes go through agents.versions, not save()."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from agents import versions
from agents.models import Agent, AgentVersion, Deployment, VersionStatus


class ConfigErrorSerializer(serializers.Serializer):
    path = serializers.CharField(
        help_text='Where in the YAML, e.g. "followup.steps[2].channel"; "<yaml>" when it cannot be read.'
    )
    message = serializers.CharField()
    hint = serializers.CharField(allow_blank=True)


class ValidationResultSerializer(serializers.Serializer):
    """Every error of a config at once, so a builder can fix them in one pass."""

    ok = serializers.BooleanField()
    errors = ConfigErrorSerializer(many=True)


class AgentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Agent
        fields = ["slug", "name", "description", "created_at"]
        read_only_fields = ["created_at"]


class AgentCreateSerializer(serializers.Serializer):
    """A new agent of the caller's organization: a copy of a template, or an empty one named here."""

    from_template = serializers.SlugField(
        required=False, max_length=80,
        help_text="Copy this template (GET /api/v1/templates/): same slug, its config as draft v1.",
    )
    slug = serializers.SlugField(required=False, max_length=80)
    name = serializers.CharField(required=False, max_length=200)
    description = serializers.CharField(required=False, allow_blank=True, default="")

    def validate(self, attrs: dict) -> dict:
        if attrs.get("from_template"):
            extra = sorted(key for key in ("slug", "name") if key in attrs)
            if extra:
                raise serializers.ValidationError(
                    {extra[0]: "a copy keeps the template's slug and name; give from_template alone"}
                )
            return attrs
        missing = {key: "required unless from_template is given" for key in ("slug", "name") if not attrs.get(key)}
        if missing:
            raise serializers.ValidationError(missing)
        return attrs


class TemplateSerializer(serializers.ModelSerializer):
    """A template agent every organization may read and copy; `source` is its latest published config."""

    version = serializers.IntegerField(read_only=True, allow_null=True, help_text="Its latest published version.")
    source = serializers.CharField(read_only=True, allow_null=True)

    class Meta:
        model = Agent
        fields = ["slug", "name", "description", "version", "source", "created_at"]
        read_only_fields = fields

    def to_representation(self, agent: Agent) -> dict:
        origin = versions.latest_published(agent)
        data = super().to_representation(agent)
        data.update(version=origin.number if origin else None, source=origin.source if origin else None)
        return data


class VersionSummarySerializer(serializers.ModelSerializer):
    """A version in lists: no source or plan, which can be large."""

    agent = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    valid = serializers.BooleanField(source="is_valid", read_only=True)

    class Meta:
        model = AgentVersion
        fields = ["agent", "number", "status", "valid", "config_hash", "created_at", "published_at"]
        read_only_fields = fields


class VersionSerializer(VersionSummarySerializer):
    validation = serializers.SerializerMethodField()

    class Meta(VersionSummarySerializer.Meta):
        fields = [*VersionSummarySerializer.Meta.fields, "source", "compiled", "validation", "gate_scorecard"]
        read_only_fields = fields

    @extend_schema_field(ValidationResultSerializer)
    def get_validation(self, version: AgentVersion) -> dict:
        # The errors stored when the source was last written; `validate/` recomputes them.
        return {"ok": version.is_valid, "errors": version.validation_errors}


class SourceSerializer(serializers.Serializer):
    """A draft's YAML. Blank or malformed YAML is accepted and reported as config errors, not as a 400."""

    source = serializers.CharField(allow_blank=True, trim_whitespace=False)


class PublishRefusalSerializer(serializers.Serializer):
    detail = serializers.CharField()
    scorecard = serializers.JSONField(allow_null=True, help_text="The gate's scorecard, when simulations ran.")
    errors = ConfigErrorSerializer(many=True, help_text="The draft's config errors, when it is invalid.")


class OwnAgentField(serializers.SlugRelatedField):
    """An agent slug looked up among the caller's organization's agents only (templates deploy once copied)."""

    default_error_messages = {
        "does_not_exist": "your organization has no agent {slug_name}={value}; copy a template or create it first.",
    }

    def get_queryset(self):
        request = self.context.get("request")
        organization = getattr(request, "organization", None)
        return Agent.objects.filter(organization=organization) if organization else Agent.objects.none()


class DeploymentSerializer(serializers.ModelSerializer):
    """Written as {"agent": slug, "version": number}; the organization is always the caller's."""

    agent = OwnAgentField(slug_field="slug", queryset=Agent.objects.none())
    version = serializers.IntegerField(source="version.number", min_value=1)
    version_status = serializers.CharField(source="version.status", read_only=True)

    class Meta:
        model = Deployment
        fields = ["id", "agent", "version", "version_status", "active", "created_at"]
        read_only_fields = ["id", "active", "created_at"]

    def validate(self, attrs: dict) -> dict:
        """Replaces the version number with the published AgentVersion it names."""
        agent: Agent = attrs["agent"]
        number: int = attrs["version"]["number"]
        version = AgentVersion.objects.filter(agent=agent, number=number).first()
        if version is None:
            raise serializers.ValidationError({"version": f"{agent.slug} has no version {number}."})
        if version.status != VersionStatus.PUBLISHED:
            raise serializers.ValidationError(
                {"version": f"{agent.slug} v{number} is {version.status}; only published versions can be deployed."}
            )
        return {**attrs, "version": version}
