"""Edit types: what kind of change an instruction asks for.

The types (add, remove, replace, attribute/colour, material, style,
background, text, action/pose, count, global/tone, multi-step, and other)
follow the task types GEdit-Bench and EditScore publish. They are found by
rules on the instruction, kept as data in ``edit_types.toml`` beside this
module (patterns tried in order; the first match wins), and a manifest
column ``edit_type`` overrides them (a type name or an alias such as
GEdit-Bench's ``color_alter``). ``editlens edit-types`` can also ask a judge.

>>> classify_instruction("Remove the man.")
'remove'
>>> classify_instruction("make the car red")
'attribute'
>>> classify_instruction("add a hat and make it blue")
'multi_step'
"""

from __future__ import annotations

import functools
import re
import tomllib
from dataclasses import dataclass
from importlib import resources
from typing import Any, Iterable, Mapping

from editlens.errors import InputError

#: the manifest column (sample metadata key) that overrides the rules
COLUMN = "edit_type"
OTHER = "other"
MULTI = "multi_step"


@dataclass(frozen=True, eq=False)
class Rule:
    type: str
    patterns: tuple[re.Pattern[str], ...]
    split: re.Pattern[str] | None = None

    @functools.cached_property
    def combined(self) -> re.Pattern[str] | None:
        """The patterns as one alternation: one search per rule instead of one per pattern."""
        return re.compile("|".join(f"(?:{p.pattern})" for p in self.patterns)) if self.patterns else None

    def matches(self, text: str) -> bool:
        return self.combined is not None and self.combined.search(text) is not None


@dataclass(frozen=True)
class EditTypes:
    """The edit types, their aliases and the rules, as read from the data file."""

    names: tuple[str, ...]
    labels: dict[str, str]
    descriptions: dict[str, str]
    aliases: dict[str, str]
    rules: tuple[Rule, ...]

    def canonical(self, name: str) -> str | None:
        """The type a name or alias stands for (case and ``-``/``_``/space insensitive), or ``None``."""
        key = str(name).strip().lower()
        for k in (key, key.replace(" ", "_"), key.replace("-", "_"), key.replace("_", "-")):
            if k in self.labels:
                return k
            if k in self.aliases:
                return self.aliases[k]
        for n, label in self.labels.items():
            if label.lower() == key:
                return n
        return None


def _compile(pattern: str, words: Mapping[str, str], where: str) -> re.Pattern[str]:
    for name, alternation in words.items():
        pattern = pattern.replace(f"%{name}%", alternation)
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InputError(f"{where}: pattern {pattern!r} is not a valid regular expression ({exc})") from None


def load_edit_types(text: str | None = None, where: str = "editlens/data/edit_types.toml") -> EditTypes:
    """Parse an edit-type rules file (default: the one shipped with editlens)."""
    if text is None:
        text = resources.files("editlens.data").joinpath("edit_types.toml").read_text(encoding="utf-8")
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{where}: not valid TOML ({exc})") from None
    types = doc.get("type") or []
    labels = {str(t["name"]): str(t.get("label", t["name"])) for t in types}
    descriptions = {str(t["name"]): str(t.get("describe", "")) for t in types}
    if OTHER not in labels:
        raise InputError(f"{where}: the types must include {OTHER!r} (what no rule matches)")
    aliases = {str(k).lower(): str(v) for k, v in (doc.get("aliases") or {}).items()}
    for alias, target in aliases.items():
        if target not in labels:
            raise InputError(f"{where}: alias {alias!r} names the unknown type {target!r}")
    words = {str(k): str(v) for k, v in (doc.get("words") or {}).items()}
    rules = []
    for i, r in enumerate(doc.get("rule") or [], 1):
        rtype = str(r.get("type"))
        if rtype not in labels:
            raise InputError(f"{where}: rule {i} has the unknown type {rtype!r} (types: {', '.join(labels)})")
        pats = tuple(_compile(p, words, f"{where}: rule {i} ({rtype})") for p in r.get("patterns") or [])
        split = _compile(r["split"], words, f"{where}: rule {i} ({rtype})") if r.get("split") else None
        rules.append(Rule(rtype, pats, split))
    return EditTypes(tuple(labels), labels, descriptions, aliases, tuple(rules))


@functools.lru_cache(maxsize=1)
def edit_types() -> EditTypes:
    """The shipped edit types (read once)."""
    return load_edit_types()


def _normalise(instruction: str) -> str:
    return re.sub(r"\s+", " ", str(instruction).strip().lower())


def _first_match(text: str, rules: Iterable[Rule]) -> str:
    for rule in rules:
        if rule.split is None and rule.matches(text):
            return rule.type
    return OTHER


def classify_instruction(instruction: str, types: EditTypes | None = None) -> str:
    """The edit type of an instruction by the rules (``other`` when none matches)."""
    if types is None:
        return _classify_default(instruction)  # many edits share an instruction (one per editor): cached
    return _classify(instruction, types)


@functools.lru_cache(maxsize=65536)
def _classify_default(instruction: str) -> str:
    return _classify(instruction, edit_types())


def _classify(instruction: str, types: EditTypes) -> str:
    text = _normalise(instruction).rstrip(" .!?")
    for rule in types.rules:
        if rule.split is not None:
            # a clause counts when it alone gets a type from the rules (a bare noun phrase does not)
            clauses = [c for c in rule.split.split(text) if c and c.strip()]
            if len(clauses) >= 2:
                single = [r for r in types.rules if r.split is None]
                if sum(_first_match(c, single) != OTHER for c in clauses) >= 2:
                    return rule.type
            continue
        if rule.matches(text):
            return rule.type
    return OTHER


def edit_type_of(sample: Any, types: EditTypes | None = None) -> str:
    """A sample's edit type: its ``edit_type`` column when it has one, else the rules.

    ``sample`` is an :class:`~editlens.core.types.EditSample` (or anything
    with ``instruction`` and ``metadata``), or a dict with those keys. An
    ``edit_type`` value that names no type is an error naming the sample.
    """
    types = types or edit_types()
    if isinstance(sample, Mapping):
        meta, instruction, sid = sample.get("metadata") or sample, sample.get("instruction"), sample.get("id")
    else:
        meta, instruction, sid = getattr(sample, "metadata", None) or {}, sample.instruction, getattr(sample, "id", None)
    given = meta.get(COLUMN)
    if given not in (None, ""):
        found = types.canonical(str(given))
        if found is None:
            raise InputError(f"sample {sid!r}: {COLUMN} {given!r} is not an edit type; use one of "
                             f"{', '.join(types.names)} (or an alias: {', '.join(sorted(types.aliases))})")
        return found
    if not instruction:
        return OTHER
    return classify_instruction(str(instruction), None if types is edit_types() else types)


def edit_type_label(name: str) -> str:
    """The display label of a type, e.g. ``attribute`` -> ``attribute/colour``."""
    return edit_types().labels.get(name, name)
