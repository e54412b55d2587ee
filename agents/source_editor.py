"""The agent builder's source editor: the YAML textarea beside a line-number gutter.

The page's script (static/lucia/builder.js) keeps the gutter in step while the
builder types and marks the lines config errors point at; without it the
gutter still numbers the lines as saved.
"""

from __future__ import annotations

from django import forms
from django.utils.html import format_html, format_html_join

EDITOR = '<div class="lucia-editor" data-lucia-editor><div class="lucia-gutter" aria-hidden="true">{}</div>{}</div>'


def line_gutter(text: str) -> str:
    """One numbered row per line of `text`."""
    count = max(1, text.count("\n") + 1)
    return format_html_join("", '<span data-line="{}">{}</span>', ((n, n) for n in range(1, count + 1)))


def read_only(text: str) -> str:
    """A published version's source: the same gutter beside a <pre>."""
    return format_html(EDITOR, line_gutter(text), format_html('<pre class="lucia-source">{}</pre>', text))


class SourceEditor(forms.Textarea):
    """The YAML textarea with a line-number gutter; no wrapping, so gutter rows and source lines stay aligned."""

    def __init__(self) -> None:
        super().__init__(attrs={"rows": 36, "spellcheck": "false", "wrap": "off", "class": "lucia-source",
                                "id": "id_source", "autocomplete": "off"})

    def render(self, name, value, attrs=None, renderer=None) -> str:
        textarea = super().render(name, value, attrs, renderer)
        return format_html(EDITOR, line_gutter(value or ""), textarea)
