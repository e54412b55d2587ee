"""Shapes of agents, versions and deployments on the wire. Writes go through agents.versions, not save()."""

from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

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


class DeploymentSerializer(serializers.ModelSerializer):
    """Written as {"agent": slug, "version": number}; the organization is always the caller's."""

    agent = serializers.SlugRelatedField(slug_field="slug", queryset=Agent.objects.all())
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
