"""The Studio's agent pages: organizations and their API keys, agents, versions, deployments.

Every write goes through a domain module (`agents.versions`, `agents.api_keys`,
`simulator.gate`); the admin only collects input and reports with message_user.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse
from django.utils import timezone
from django.utils.html import format_html

from agents import api_keys, source_editor, versions
from agents.admin_forms import AgentForm, AgentVersionForm, CopyTemplateForm, DeploymentForm
from agents.models import Agent, AgentVersion, ApiKey, Deployment, Organization, VersionStatus
from agents.staff import OrganizationScopedAdmin, scope_to_user, visible_organizations
from simulator.builder_views import BuilderViews


class SuperuserDeleteMixin:
    """Staff are ops for every organization; only superusers delete."""

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        return request.user.is_superuser and super().has_delete_permission(request, obj)


class WritesThroughDomain:
    """For admins whose save_form returns the row a domain function wrote: nothing is left to save.

    Django calls save_form before it validates inline formsets, so these
    admins show inlines only on pages that cannot be saved.
    """

    def save_model(self, request: HttpRequest, obj, form, change: bool) -> None:
        """Nothing: save_form's domain function saved the row."""

    def save_related(self, request: HttpRequest, form, formsets, change: bool) -> None:
        """Nothing: read-only inlines, no many-to-many; form.save_m2m does not exist since form.save() never ran."""


class ApiKeyInline(admin.TabularInline):
    model = ApiKey
    fields = readonly_fields = ["name", "role", "prefix", "created_at", "last_used_at", "revoked_at"]
    extra = 0
    can_delete = False

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False  # keys are issued by the organization's actions, which show the plain key once


@admin.register(Organization)
class OrganizationAdmin(OrganizationScopedAdmin, SuperuserDeleteMixin, admin.ModelAdmin):
    organization_path = "pk"
    list_display = ["name", "slug", "default_timezone", "sandbox", "created_at"]
    list_filter = ["sandbox"]
    search_fields = ["name", "slug"]
    inlines = [ApiKeyInline]
    actions = ["issue_builder_key", "issue_runner_key"]
    filter_horizontal = ["staff"]

    def get_exclude(self, request: HttpRequest, obj=None):
        # Who works for an organization is the superusers' to decide.
        return None if request.user.is_superuser else ["staff"]

    def formfield_for_manytomany(self, db_field, request: HttpRequest, **kwargs):
        if db_field.name == "staff":
            kwargs["queryset"] = db_field.related_model.objects.filter(is_staff=True, is_active=True)
        return super().formfield_for_manytomany(db_field, request, **kwargs)

    @admin.action(description="Issue a builder API key (shown once)", permissions=["change"])
    def issue_builder_key(self, request: HttpRequest, queryset) -> None:
        self._issue(request, queryset, role=ApiKey.Role.BUILDER)

    @admin.action(description="Issue a runner API key (shown once)", permissions=["change"])
    def issue_runner_key(self, request: HttpRequest, queryset) -> None:
        self._issue(request, queryset, role=ApiKey.Role.RUNNER)

    def _issue(self, request: HttpRequest, queryset, *, role: str) -> None:
        for organization in queryset:
            name = f"Studio, {request.user} {timezone.now():%Y-%m-%d %H:%M}"
            _, plain = api_keys.issue_key(organization, name=name, role=role)
            self.message_user(
                request, f"New {role} key for {organization.slug}: {plain} (copy it now: only its hash is stored)",
                messages.WARNING,
            )


@admin.register(ApiKey)
class ApiKeyAdmin(OrganizationScopedAdmin, SuperuserDeleteMixin, admin.ModelAdmin):
    list_display = ["name", "organization", "role", "prefix", "created_at", "last_used_at", "revoked_at"]
    list_filter = ["role", "organization"]
    list_select_related = ["organization"]
    search_fields = ["name", "prefix", "organization__slug"]
    fields = readonly_fields = list_display
    actions = ["revoke"]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # issue keys from the organization page

    @admin.action(description="Revoke", permissions=["change"])
    def revoke(self, request: HttpRequest, queryset) -> None:
        for api_key in queryset:
            api_keys.revoke_key(api_key)
        self.message_user(request, f"Revoked {queryset.count()} key(s).")


@admin.display(boolean=True, description="valid config")
def valid_config(version: AgentVersion) -> bool:
    return version.is_valid


class VersionInline(admin.TabularInline):
    model = AgentVersion
    fields = readonly_fields = ["number", "status", valid_config, "config_hash", "created_at", "published_at"]
    extra = 0
    can_delete = False
    show_change_link = True
    ordering = ["-number"]

    def has_add_permission(self, request: HttpRequest, obj=None) -> bool:
        return False


@admin.register(Agent)
class AgentAdmin(OrganizationScopedAdmin, WritesThroughDomain, SuperuserDeleteMixin, admin.ModelAdmin):
    unowned_visible = True  # templates: every staff user reads them; copying one needs agents.add_agent
    form = AgentForm
    action_form = CopyTemplateForm
    list_display = ["slug", "name", "owner", "created_at"]
    list_filter = [("organization", admin.EmptyFieldListFilter), "organization"]
    list_select_related = ["organization"]
    search_fields = ["slug", "name", "organization__slug"]
    inlines = [VersionInline]
    actions = ["copy_into_organization"]

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        if db_field.name == "organization":
            # New agents belong to an organization: templates come only from fixtures/agents/ through `seed`.
            kwargs["queryset"] = visible_organizations(request.user)
            field = super().formfield_for_foreignkey(db_field, request, **kwargs)
            field.required, field.empty_label = True, None
            return field
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    @admin.display(description="organization", ordering="organization__slug")
    def owner(self, agent: Agent) -> str:
        return agent.organization.slug if agent.organization else "template"

    def get_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return ["organization", "slug", "name", "description"] + (["draft_link"] if obj else [])

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        # Name and description follow the newest valid config.
        return ["draft_link"] if obj else []

    @admin.display(description="Edit")
    def draft_link(self, agent: Agent) -> str:
        if agent.is_template:
            return "A template is read-only: copy it into an organization (action “Copy into my organization”)."
        latest = versions.latest_version(agent)
        if latest is not None and latest.is_editable:
            url = reverse("admin:agents_agentversion_change", args=[latest.pk])
            return format_html('<a href="{}">Edit draft v{}</a>', url, latest.number)
        url = reverse("admin:agents_agentversion_add") + f"?agent={agent.pk}"
        label = f"New draft from v{latest.number}" if latest else "Write the first version"
        return format_html('<a href="{}">{}</a>', url, label)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        # Nothing on an existing agent is edited here: its config lives in versions.
        return super().has_change_permission(request, obj) and obj is None

    def changelist_view(self, request: HttpRequest, extra_context=None):
        response = super().changelist_view(request, extra_context)
        action_form = getattr(response, "context_data", {}).get("action_form")
        if action_form is not None:  # the copy's target: only the user's organizations are offered
            action_form.fields["organization"].queryset = visible_organizations(request.user)
        return response

    def get_inline_instances(self, request: HttpRequest, obj=None) -> list:
        return super().get_inline_instances(request, obj) if obj else []

    def save_form(self, request: HttpRequest, form, change: bool) -> Agent:
        data = form.cleaned_data
        return versions.create_agent(data["organization"], slug=data["slug"], name=data["name"],
                                     description=data["description"])

    @admin.action(description="Copy into my organization", permissions=["add"])
    def copy_into_organization(self, request: HttpRequest, queryset) -> None:
        organization = visible_organizations(request.user).filter(pk=request.POST.get("organization") or None).first()
        if organization is None:
            self.message_user(request, "Choose the organization that gets the copy.", messages.ERROR)
            return
        for agent in queryset:
            if not agent.is_template:
                self.message_user(request, f"{agent.slug} belongs to {agent.organization.slug}; only templates are "
                                  "copied.", messages.ERROR)
                continue
            try:
                draft = versions.copy_template(agent, organization=organization, user=request.user)
            except versions.VersionError as refused:
                self.message_user(request, f"{agent.slug}: {refused}", messages.ERROR)
            else:
                self.message_user(request, f"Copied {agent.slug} into {organization.slug} as draft v{draft.number}: "
                                  "simulate and publish it, then deploy.", messages.SUCCESS)


@admin.register(AgentVersion)
class AgentVersionAdmin(BuilderViews, OrganizationScopedAdmin, WritesThroughDomain, SuperuserDeleteMixin,
                        admin.ModelAdmin):
    organization_path, unowned_visible = "agent__organization", True
    form = AgentVersionForm
    list_display = ["agent", "owner", "number", "status", valid_config, "short_hash", "created_at", "published_at"]
    list_filter = ["status", ("agent__organization", admin.EmptyFieldListFilter), "agent__organization", "agent"]
    list_select_related = ["agent__organization"]
    search_fields = ["agent__slug", "agent__organization__slug"]
    actions = ["validate", "simulate", "publish", "retire"]

    class Media:
        css = {"all": ["lucia/builder.css"]}
        js = ["lucia/builder.js"]

    def formfield_for_foreignkey(self, db_field, request: HttpRequest, **kwargs):
        if db_field.name == "agent":  # templates change only through fixtures/agents/ and `manage.py seed`
            kwargs["queryset"] = Agent.objects.filter(organization__in=visible_organizations(request.user))
        return super().formfield_for_foreignkey(db_field, request, **kwargs)

    def change_view(self, request: HttpRequest, object_id: str, form_url: str = "", extra_context=None):
        version = self.get_object(request, object_id)
        if version is not None:
            extra_context = {**(extra_context or {}), **self.builder_context(request, version)}
        return super().change_view(request, object_id, form_url, extra_context)

    def get_fields(self, request: HttpRequest, obj=None) -> list[str]:
        if obj is None:
            return ["agent", "source"]
        if obj.is_editable:
            return ["agent", "number", "status", "source", "config_hash", "created_by", "created_at"]
        return ["agent", "number", "status", "source_text", "config_hash", "gate_scorecard_link", "published_at",
                "created_by", "created_at"]

    def get_readonly_fields(self, request: HttpRequest, obj=None) -> list[str]:
        if obj is None:
            return []
        return [name for name in self.get_fields(request, obj) if name != "source" or not obj.is_editable]

    @admin.display(description="gate scorecard")
    def gate_scorecard_link(self, version: AgentVersion) -> str:
        """The scorecard the gate passed (its JSON copy is kept on the version) as a verdict and a link."""
        card = version.gate_scorecard
        if not card:
            return "-"
        cases = card.get("cases") or []
        summary = (f"scorecard #{card.get('id')}: {'passed' if card.get('passed') else 'failed'}, "
                   f"{sum(1 for case in cases if case.get('passed'))} of {len(cases)} cases")
        if not card.get("id"):
            return summary
        return format_html('<a href="{}">{}</a>', reverse("admin:simulator_scorecard_change", args=[card["id"]]),
                           summary)

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        # Published and retired versions, and every template version, open as view-only pages.
        editable = obj is None or (obj.is_editable and not obj.agent.is_template)
        return super().has_change_permission(request, obj) and editable

    def has_delete_permission(self, request: HttpRequest, obj=None) -> bool:
        editable = obj is None or (obj.is_editable and not obj.agent.is_template)
        return super().has_delete_permission(request, obj) and editable

    def get_changeform_initial_data(self, request: HttpRequest) -> dict:
        initial = super().get_changeform_initial_data(request)
        agent = scope_to_user(Agent.objects.all(), request.user, include_unowned=True).filter(
            pk=request.GET.get("agent") or None).first()
        latest = versions.latest_version(agent) if agent else None
        if latest is not None:
            initial["source"] = latest.source  # a new draft starts from the latest version
        return initial

    def get_search_results(self, request: HttpRequest, queryset, search_term: str):
        queryset, duplicates = super().get_search_results(request, queryset, search_term)
        if request.GET.get("model_name") == "deployment":
            queryset = queryset.filter(status=VersionStatus.PUBLISHED)  # only published versions deploy
        return queryset, duplicates

    @admin.display(description="organization", ordering="agent__organization__slug")
    def owner(self, version: AgentVersion) -> str:
        return version.agent.organization.slug if version.agent.organization else "template"

    @admin.display(description="hash")
    def short_hash(self, version: AgentVersion) -> str:
        return version.config_hash[:12]

    @admin.display(description="source")
    def source_text(self, version: AgentVersion) -> str:
        return source_editor.read_only(version.source)

    def save_form(self, request: HttpRequest, form, change: bool) -> AgentVersion:
        source = form.cleaned_data["source"]
        if change:
            return versions.update_draft(form.instance, source=source)
        agent = form.cleaned_data["agent"]
        return versions.create_draft(agent, source=source, user=request.user, based_on=versions.latest_version(agent))

    def response_add(self, request: HttpRequest, obj: AgentVersion, post_url_continue=None) -> HttpResponse:
        return self._after_save(request, obj) or super().response_add(request, obj, post_url_continue)

    def response_change(self, request: HttpRequest, obj: AgentVersion) -> HttpResponse:
        return self._after_save(request, obj) or super().response_change(request, obj)

    def _after_save(self, request: HttpRequest, version: AgentVersion) -> HttpResponse | None:
        """Stay on an invalid draft so its errors show above the source; "Save and validate" stays too."""
        change_url = reverse("admin:agents_agentversion_change", args=[version.pk])
        if not version.is_valid:
            count = len(version.validation_errors)
            self.message_user(request, f"{version} saved with {count} config error(s), listed above the source "
                              "with their lines.", messages.WARNING)
            return HttpResponseRedirect(change_url)
        if "_validate" in request.POST:
            self.message_user(request, f"{version} saved; its config is valid. Simulate it next.", messages.SUCCESS)
            return HttpResponseRedirect(change_url)
        return None

    @admin.action(description="Validate", permissions=["change"])  # refreshes a draft's stored errors
    def validate(self, request: HttpRequest, queryset) -> None:
        for version in queryset.select_related("agent"):
            result = versions.validate(version)
            if result.ok:
                self.message_user(request, f"{version}: valid")
            else:
                problems = "; ".join(str(error) for error in result.errors)
                self.message_user(request, f"{version}: {len(result.errors)} error(s): {problems}", messages.ERROR)

    @admin.action(description="Retire", permissions=["change"])
    def retire(self, request: HttpRequest, queryset) -> None:
        for version in queryset.select_related("agent"):
            try:
                versions.refuse_template(version.agent)
                retired = versions.retire(version)
            except versions.VersionError as refused:
                self.message_user(request, f"{version}: {refused}", messages.ERROR)
            else:
                self.message_user(request, f"Retired {retired}.", messages.SUCCESS)


@admin.register(Deployment)
class DeploymentAdmin(OrganizationScopedAdmin, WritesThroughDomain, SuperuserDeleteMixin, admin.ModelAdmin):
    form = DeploymentForm
    list_display = ["organization", "agent", "version", "active", "created_at"]
    list_filter = ["organization", "active", "agent"]
    list_select_related = ["organization", "agent", "version", "version__agent"]
    search_fields = ["organization__slug", "agent__slug"]
    autocomplete_fields = ["organization", "version"]

    def get_fields(self, request: HttpRequest, obj=None) -> list[str]:
        return ["organization", "version"] if obj is None else ["organization", "agent", "version", "active",
                                                                 "created_at"]

    def has_change_permission(self, request: HttpRequest, obj=None) -> bool:
        return super().has_change_permission(request, obj) and obj is None

    def save_form(self, request: HttpRequest, form, change: bool) -> Deployment:
        return versions.deploy(form.cleaned_data["organization"], form.cleaned_data["version"])
