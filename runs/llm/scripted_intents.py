"""How the scripted model reads a reply: an ordered table of intents, evidence it may claim, and dates.

Phrases match case-insensitively on word boundaries. The plan's
`model.scripted.intents` add phrases to the built-in ones; they never remove
any. The first intent in INTENT_ORDER that matches wins, so safety comes first:
an opt-out, a dispute or a prompt injection is never read as anything milder.
"""

from __future__ import annotations

import calendar
import functools
import re
from datetime import date, datetime, timedelta

from agents.config import patterns

# First match wins. "unclassified" is what is left: it goes to a human.
INTENT_ORDER = (
    "opt_out", "dispute", "injection", "out_of_office", "wrong_person", "request_from_us",
    "channel_request", "claim_done", "acknowledgement",
)

_BUILTIN: dict[str, tuple[str, ...]] = {
    "opt_out": (
        r"unsubscribe", r"opt[ -]out", r"stop (contacting|emailing|messaging|texting|calling|sending)",
        r"(do not|don't) (contact|email|text|call|message) (me|us)", r"remove (me|us) from", r"take (me|us) off",
        r"leave (me|us) alone", r"no more (messages|emails|texts|calls)",
    ),
    "dispute": (
        r"disputed?", r"disagree", r"(do not|don't|doesn't|does not|never) owe", r"never agreed", r"complain(t|ts)?",
        r"lawyers?", r"attorneys?", r"legal action", r"sue", r"lawsuit", r"harass(ment|ing)?", r"report you",
        r"scam", r"fraud", r"threat(en)?s?", r"unacceptable", r"how dare",
    ),
    "injection": (
        r"(ignore|disregard|forget|override)\b[^.!?\n]{0,40}\b(instructions?|prompts?|rules|above|previous|guidelines)",
        r"system prompt", r"you are now", r"new instructions", r"developer mode", r"as an ai",
        r"mark (the|all|every|each|this) tasks?",
    ),
    "out_of_office": (
        r"out of (the )?office", r"ooo", r"automatic reply", r"auto-?reply", r"on (vacation|holiday|leave)",
        r"away (until|till|from)", r"(back|returning|return) (on|in)", r"be back", r"(not available|unavailable)",
        r"(call|contact|email|text|ping|try) me (back )?in", r"(try|check|ask|reach out) (again|back) in",
        r"get back to me in", r"follow up in",
    ),
    "wrong_person": (
        r"wrong person", r"not the right (person|contact)", r"no longer (work|handle|with|at)", r"left the company",
        r"not responsible", r"(handles|handling|in charge of|responsible for) (this|that|these|it)",
        r"(please )?(contact|reach out to|write to|email) (him|her|them|my colleague)", r"forwarded",
        r"new (email|address|number|phone)", r"(email|address|number|phone) is now",
        r"(reach|contact|email|text) me at", r"from now on", r"going forward",
    ),
    "request_from_us": (
        r"fees?", r"fax(ed)?", r"notari[sz]ed", r"wet signature",
        r"(need|needs|require|requires|required|must|please|can you|could you|would you)\b[^.!?\n]{0,60}"
        r"\b(payment|pay|form|signature|sign|authori[sz]ation|consent|release|copy of your)",
    ),
    "channel_request": (
        r"(text|sms|call|phone|ring|slack|email|e-mail|message) (me|us) (instead|rather|on|at)",
        r"prefer (to be contacted )?(by |via |on )?(email|e-mail|text|sms|phone|a call|slack)",
        r"(instead|rather) (of|than) (email|e-mail|text|sms|calls?|slack)",
    ),
    "claim_done": (
        r"already (sent|paid|submitted|uploaded|provided|emailed|did|done|returned|mailed)",
        r"(i|we)( have|'ve)? (sent|paid|submitted|mailed)", r"sent it", r"(it's|it is|that's) (done|been sent)",
        r"taken care of", r"was sent",
    ),
    "acknowledgement": (
        r"(will|i'll|we'll|he'll|she'll|they'll) (send|do|get|look|check|have|forward|let you know|keep you posted)",
        r"working on (it|this)", r"on it", r"sure", r"ok(ay)?", r"not yet", r"still (testing|working|waiting|on)",
        r"in progress", r"almost (there|done|ready)", r"(an|quick|small) update",
        r"got it", r"noted", r"thanks?", r"thank you", r"asap", r"soon",
    ),
}

# Whole-message opt-outs (the SMS conventions), so "stop" inside a sentence is not one.
_OPT_OUT_WORDS = {"stop", "stopall", "stop all", "unsubscribe", "cancel", "end", "quit", "please stop", "stop please"}

# The lookbehind starts a match only where an address can start; without it a long run of letters costs n².
_EMAIL = re.compile(r"(?<![\w.+-])[\w.+-]+@[\w-]+(?:\.[\w-]+)+")
_PHONE = re.compile(r"\+?\d[\d ().-]{7,}\d")


def classify(text: str, *, extra: dict[str, list[str]] | None = None) -> str:
    """The reply's intent: one of INTENT_ORDER, or "unclassified"."""
    normal = normalize(patterns.bounded(text))
    if normal.strip(" .!") in _OPT_OUT_WORDS:
        return "opt_out"
    extra_key = tuple(sorted((intent, tuple(phrases)) for intent, phrases in (extra or {}).items()))
    compiled = _patterns(extra_key)
    for intent in INTENT_ORDER:
        if compiled[intent].search(normal):
            return intent
    return "unclassified"


_CHANNEL_NAMES = {"text": "sms", "sms": "sms", "texting": "sms", "call": "voice", "phone": "voice", "ring": "voice",
                  "slack": "slack", "email": "email", "e-mail": "email", "mail": "email"}
_WORD = "|".join(sorted(_CHANNEL_NAMES, key=len, reverse=True))
# Where a reply names the channel it wants, most explicit first; "rarely on Slack" names one it does not want.
_CHANNEL_ASKS = (
    re.compile(rf"\b({_WORD}) (?:me|us)\b"),
    re.compile(rf"\bprefer (?:to be contacted )?(?:by |via |on |over )?(?:an? )?({_WORD})\b"),
    re.compile(rf"\b(?:by|via|over|through) ({_WORD})\b"),
)


def requested_channel(text: str) -> str | None:
    """The channel a "please email me instead" reply asks for, or None when it names none."""
    normal = normalize(patterns.bounded(text))
    for pattern in _CHANNEL_ASKS:
        if match := pattern.search(normal):
            return _CHANNEL_NAMES[match.group(1)]
    return None


def new_addresses(text: str, *, known: set[str]) -> list[str]:
    """Email addresses and phone numbers in `text` that are not in `known` (lowercased, digits only for phones)."""
    text = patterns.bounded(text)
    found = [match.lower() for match in _EMAIL.findall(text)]
    found += [re.sub(r"\D", "", match) for match in _PHONE.findall(_ISO.sub(" ", text))]
    return [item for item in dict.fromkeys(found) if item not in known]


def normalize(text: str) -> str:
    return text.lower().replace("\u2019", "'").replace("\u2018", "'")


@functools.lru_cache(maxsize=64)
def _patterns(extra_key: tuple) -> dict[str, re.Pattern[str]]:
    extra = dict(extra_key)
    compiled = {}
    for intent in INTENT_ORDER:
        alternatives = list(_BUILTIN[intent]) + [re.escape(normalize(p)) for p in extra.get(intent, ())]
        compiled[intent] = re.compile(r"(?<![\w'])(?:" + "|".join(alternatives) + r")(?![\w])")
    return compiled


def may_prove(done_when: dict, *, kind: str, text: str, attachments: list[dict], fields: dict) -> bool:
    """Whether an event looks like evidence for a done_when check (a claim worth making; runs.evidence decides)."""
    check = done_when.get("type")
    try:
        if check == "attachment_received":
            return kind == "inbound" and any(_attachment_fits(a, done_when) for a in attachments)
        if check == "reply_matches":
            return kind == "inbound" and bool(done_when.get("pattern") and patterns.search(done_when["pattern"], text))
        if check == "field_extracted":
            source = done_when.get("from", "reply")
            if source != "any" and source != {"inbound": "reply", "call_report": "call"}.get(kind):
                return False
            field = done_when.get("field", "")
            if field in fields:
                return True
            label = re.escape(field.replace("_", " "))
            if done_when.get("pattern"):
                return bool(patterns.search(done_when["pattern"], text))
            return bool(re.search(rf"(?im)^\s*{label}\s*:\s*\S", patterns.bounded(text)))
    except patterns.PatternError:
        return False
    return False


def _attachment_fits(attachment: dict, done_when: dict) -> bool:
    if attachment.get("received") is False:
        return False
    content_type = (attachment.get("content_type") or "").split(";")[0].strip().lower()
    wanted = done_when.get("content_types") or []
    type_ok = not wanted or any(content_type == w or (w.endswith("/*") and content_type.startswith(w[:-1]))
                                for w in wanted)
    pattern = done_when.get("filename_pattern")
    return type_ok and (not pattern or bool(patterns.search(pattern, attachment.get("filename") or "")))


# --- "out until the 14th", "call me in 3 days" ---------------------------------------------------

_WEEKDAYS = {name.lower(): index for index, name in enumerate(calendar.day_name)}
_MONTHS = {name.lower(): index for index, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): index for index, name in enumerate(calendar.month_abbr) if name})
_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8, "nine": 9,
            "ten": 10, "a": 1, "a couple of": 2, "a few": 3}
_MONTH_NAMES = "|".join(sorted(_MONTHS, key=len, reverse=True))

_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")
_MONTH_DAY = re.compile(rf"\b({_MONTH_NAMES})\.? (\d{{1,2}})(?:st|nd|rd|th)?\b(?:,? (\d{{4}}))?")
_DAY_MONTH = re.compile(rf"\b(\d{{1,2}})(?:st|nd|rd|th)? (?:of )?({_MONTH_NAMES})\b(?:,? (\d{{4}}))?")
_WEEKDAY = re.compile(r"\b(?:until|till|on|after|back|returning|next) (" + "|".join(_WEEKDAYS) + r")\b")
_DAY_OF_MONTH = re.compile(r"\b(?:until|till|on|after|back on|returning on) the (\d{1,2})(?:st|nd|rd|th)?\b")
_RELATIVE = re.compile(
    r"\bin (\d+|" + "|".join(sorted(_NUMBERS, key=len, reverse=True)) + r") (business days?|days?|weeks?)\b"
)


def parse_availability(text: str, *, now: datetime | None) -> dict:
    """When to contact again: {"at": "YYYY-MM-DD"}, {"delay_s": seconds}, or {} when the text names no time."""
    normal = normalize(patterns.bounded(text))
    today = now.date() if now else None
    if today is not None and (resume := _absolute(normal, today)) is not None:
        return {"at": resume.isoformat()}
    relative = _RELATIVE.search(normal)
    if relative:
        count = int(relative.group(1)) if relative.group(1).isdigit() else _NUMBERS[relative.group(1)]
        unit = relative.group(2)
        if unit.startswith("business") and today is not None:
            return {"at": _add_business_days(today, count).isoformat()}
        days = count * 7 if unit.startswith("week") else count
        return {"delay_s": days * 86_400}
    if re.search(r"\btomorrow\b", normal):
        return {"delay_s": 86_400}
    if re.search(r"\bnext week\b", normal):
        return {"delay_s": 7 * 86_400}
    return {}


def _absolute(text: str, today: date) -> date | None:
    if match := _ISO.search(text):
        return _safe_date(int(match.group(1)), int(match.group(2)), int(match.group(3)))
    for pattern, month_group, day_group in ((_MONTH_DAY, 1, 2), (_DAY_MONTH, 2, 1)):
        if match := pattern.search(text):
            month, day, year = _MONTHS[match.group(month_group)], int(match.group(day_group)), match.group(3)
            found = _safe_date(int(year) if year else today.year, month, day)
            if found and not year and found < today:
                found = _safe_date(today.year + 1, month, day)
            return found
    if match := _WEEKDAY.search(text):
        ahead = (_WEEKDAYS[match.group(1)] - today.weekday()) % 7 or 7
        return today + timedelta(days=ahead)
    if match := _DAY_OF_MONTH.search(text):
        day = int(match.group(1))
        year, month = (today.year, today.month) if day > today.day else _next_month(today)
        return _safe_date(year, month, day)
    return None


def _next_month(today: date) -> tuple[int, int]:
    return (today.year + 1, 1) if today.month == 12 else (today.year, today.month + 1)


def _safe_date(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _add_business_days(start: date, count: int) -> date:
    current = start
    while count > 0:
        current += timedelta(days=1)
        if current.weekday() < 5:
            count -= 1
    return current
