"""How the scripted model reads a reply: an ordered table of intents, evidence it may claim, and dates.

Phrases match case-insensitively on word boundaries. The plan's
`model.scripted.intents` add phrases to the built-in ones; they never remove
any. The first intent in INTENT_ORDER that matches wins, so safety comes first:
an opt-out, a dispute or a prompt injection is never read as anything milder.
"""

from __future__ import annotations

import functools
import re
from datetime import date, datetime, tzinfo

from agents.config import patterns
from runs.llm import dates

# First match wins. "unclassified" is what is left: it goes to a human.
# A legal threat comes before opt-out keywords: "stop harassing me or I will sue" is for a human, not a STOP.
INTENT_ORDER = (
    "legal_threat", "opt_out", "dispute", "injection", "out_of_office", "wrong_person", "request_from_us",
    "channel_request", "promise", "claim_done", "status_update", "acknowledgement",
)
# Intents that hold only when the text also names a date (runs.llm.dates): "we will pay" alone is an
# acknowledgement, "we will pay on the 15th" a promise.
NEEDS_DATE = {"promise"}

_BUILTIN: dict[str, tuple[str, ...]] = {
    "legal_threat": (
        r"sue", r"suing", r"lawsuits?", r"lawyers?", r"attorneys?", r"solicitors?", r"legal (action|proceedings)",
        r"(see|take|taking) you (in|to) court", r"court", r"cease and desist", r"small claims",
        r"report (you|this) to (the )?(police|authorities|regulator|ftc|cfpb|bbb|attorney general)",
    ),
    "opt_out": (
        r"unsubscribe", r"opt[ -]out", r"stop (contacting|emailing|messaging|texting|calling|sending)",
        r"(do not|don't) (contact|email|text|call|message) (me|us)", r"remove (me|us) from", r"take (me|us) off",
        r"leave (me|us) alone", r"no more (messages|emails|texts|calls)",
    ),
    "dispute": (
        r"disputed?", r"disagree", r"(do not|don't|doesn't|does not|never) owe", r"never agreed", r"complain(t|ts)?",
        r"harass(ment|ing)?", r"report you",
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
        r"wrong (number|email|address|contact)", r"who is this", r"(don't|do not) know (who you are|what this is)",
        r"never heard of",
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
    "promise": (
        r"(will|'ll|shall|going to|plan to|planning to|expect to|intend to|should be able to|can|promise to) "
        r"(be )?(pay|send|transfer|wire|remit|submit|sign|return|upload|mail|settle|process|deliver|get)",
        r"(payment|transfer|check|cheque|wire|it|the (form|document|file|invoice)) "
        r"(will|should|is going to|goes|is scheduled to) (go out|be sent|be paid|be made|be processed|arrive|"
        r"be with you|reach you|be settled|be submitted)",
        r"(payment|transfer|wire) (goes|is going|will go) out", r"(scheduled|set up) (the )?(payment|transfer)",
    ),
    "claim_done": (
        r"already (sent|paid|submitted|uploaded|provided|emailed|did|done|returned|mailed)",
        r"(i|we)( have|'ve)? (sent|paid|submitted|mailed)", r"sent it", r"(it's|it is|that's) (done|been sent)",
        r"taken care of", r"was sent",
    ),
    "status_update": (
        r"on track", r"on schedule", r"(ahead of|behind|according to) (schedule|plan)", r"as planned",
        r"all (good|fine|well|set)", r"going (well|fine|smoothly|to plan)", r"progressing( well)?",
        r"(making|made) (good |some |steady )?progress", r"nothing new", r"no (change|changes|news|issues)",
        r"everything('s| is) (fine|good|going well|on track)", r"status update", r"here's (an|the|our) update",
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
_ISO = re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b")


def classify(text: str, *, extra: dict[str, list[str]] | None = None) -> str:
    """The reply's intent: one of INTENT_ORDER, or "unclassified"."""
    return classify_with_rule(text, extra=extra)[0]


def classify_with_rule(text: str, *, extra: dict[str, list[str]] | None = None) -> tuple[str, str]:
    """(intent, the rule that fired): the words that matched, "sms_keyword" for a whole-message STOP, or
    "no_rule" for "unclassified". Journaled with every classification the scripted model makes."""
    normal = normalize(patterns.bounded(text))
    if normal.strip(" .!") in _OPT_OUT_WORDS:
        return "opt_out", "sms_keyword"
    extra_key = tuple(sorted((intent, tuple(phrases)) for intent, phrases in (extra or {}).items()))
    compiled = _patterns(extra_key)
    for intent in INTENT_ORDER:
        match = compiled[intent].search(normal)
        if match is None:
            continue
        if intent in NEEDS_DATE:
            found = dates.find(normal, today=_ANY_DAY)
            if found is None:
                continue
            return intent, f"{match.group(0)!r} + date {found.rule}: {found.phrase!r}"
        return intent, repr(match.group(0))
    return "unclassified", "no_rule"


# Only whether a date is named matters to classify, not which one: any fixed day reads the same phrases.
_ANY_DAY = date(2001, 1, 1)


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


# --- "out until the 14th", "call me in 3 days", "we will pay on the 15th" -----------------------------

# Phrasings whose date is a distance from now ("in 3 days"): kept as a delay, so the time of day carries over.
_RELATIVE_RULES = {"relative", "absence_length", "tomorrow"}


def parse_availability(text: str, *, now: datetime | None, tz: tzinfo | None = None) -> dict:
    """When to contact again: {"at": "YYYY-MM-DD", "rule"}, {"delay_s": seconds, "rule"}, or {} when the text
    names no time. Dates are read in `tz` (the contact's zone; else `now`'s own)."""
    if now is None:
        return {}
    found = dates.find(patterns.bounded(text), today=now.astimezone(tz).date() if tz else now.date())
    if found is None:
        return {}
    if found.rule in _RELATIVE_RULES and found.days_ahead:
        return {"delay_s": found.days_ahead * 86_400, "rule": found.rule}
    return {"at": found.day.isoformat(), "rule": found.rule}
