"""The Studio's agent forms: what the admin pages of agents, versions and deployments accept, and their errors."""

from __future__ import annotations

from django import forms
from django.contrib.admin import helpers

from agents import source_editor
from agents.models import Agent, AgentVersion, Deployment, Organization, VersionStatus


class AgentForm(forms.ModelForm):
    class Meta:
        model = Agent
        fields = ["organization", "slug", "name", "description"]


class CopyTemplateForm(helpers.ActionForm):
    organization = forms.ModelChoiceField(
        queryset=Organization.objects.all(), required=False, label="Organization",
        help_text="For “Copy into my organization”: the organization that gets the copy.",
    )


class AgentVersionForm(forms.ModelForm):
    # Kept as written (no strip); only the browser's CRLF line endings are undone.
    source = forms.CharField(widget=source_editor.SourceEditor, strip=False)

    class Meta:
        model = AgentVersion
        fields = ["agent", "source"]

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        if "agent" in self.fields:  # templates change only through fixtures/agents/ and `manage.py seed`
            self.fields["agent"].queryset = self.fields["agent"].queryset.filter(organization__isnull=False)

    def clean(self) -> dict:
        if self.instance.pk and not self.instance.is_editable:
            raise forms.ValidationError("This version is published and read-only: edit the agent for a new draft.")
        if self.instance.pk and self.instance.agent.is_template:
            raise forms.ValidationError("Templates are read-only: copy the template into an organization.")
        return super().clean()

    def clean_source(self) -> str:
        return self.cleaned_data["source"].replace("\r\n", "\n")


class DeploymentForm(forms.ModelForm):
    class Meta:
        model = Deployment
        fields = ["organization", "version"]

    def clean_version(self) -> AgentVersion:
        version = self.cleaned_data["version"]
        if version.status != VersionStatus.PUBLISHED:
            raise forms.ValidationError(f"{version} is {version.status}; only published versions can be deployed.")
        return version

    def clean(self) -> dict:
        data = super().clean()
        organization, version = data.get("organization"), data.get("version")
        if organization and version and version.agent.organization_id != organization.pk:
            owner = version.agent.organization.slug if version.agent.organization else "a template"
            raise forms.ValidationError(
                f"{version.agent.slug} is {owner}'s agent, not {organization.slug}'s: an organization deploys only "
                "its own agents (copy a template into it first)."
            )
        return data
