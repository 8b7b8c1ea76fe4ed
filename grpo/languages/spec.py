"""Language specs: what the code needs to know about a language, read from conf/language/*.yaml.

A run's language comes from the composed config (`spec_from_config(cfg.language)`, overrides
included); `get_spec(code)` reads one language file directly (the members of language=mix, tests,
tools). Both go through the structured schema `grpo.config.LanguageConfig`, so a typo in a
language file is caught the same way as on the command line. Light module: no ICU, faker or
fastText import here.
"""

from __future__ import annotations

import math
import string
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from grpo.errors import UserError
from grpo.languages.collation import SORT_STRATEGIES, STRENGTHS
from grpo.languages.script import check_scripts

MIX = "mix"
CONFIG_PACKAGE = "grpo.conf"
GROUP = "language"

# Format tokens the environments parse: every translation must keep them verbatim.
NEW_NAME_MARKER = "// new name!"
# Keys of each environment's prompt block and the {fields} each text may use. A text may leave a
# field out; a field not listed is an error (it would raise KeyError when the env formats it).
# Texts without fields are used verbatim, so their braces are literal (\boxed{}).
PROMPT_FIELDS: dict[str, dict[str, frozenset[str]]] = {
    "alphabet_sort": {
        "first_turn": frozenset({"names", "template"}),
        "first_turn_by_family": frozenset({"names", "template"}),
        "follow_up": frozenset({"names"}),
        "follow_up_by_family": frozenset({"names"}),
        "follow_up_template": frozenset({"template"}),
        "same_format": frozenset(),
        "placeholder": frozenset({"i"}),
        "separator": frozenset(),
    },
    "reverse_text": {
        "system": frozenset(),
        "user": frozenset({"text"}),
    },
    "arithmetic": {
        "system": frozenset(),
        "user": frozenset({"expression"}),
        "reference": frozenset({"expression", "answer"}),
    },
}
# text fragments every translation must contain (machine-readable tags and formats)
PROMPT_TOKENS: dict[str, dict[str, tuple[str, ...]]] = {
    "alphabet_sort": {
        "first_turn": ("<alphabetical_sorted>", "</alphabetical_sorted>", "{template}", "{names}"),
        "first_turn_by_family": ("<alphabetical_sorted>", "</alphabetical_sorted>", "{template}", "{names}"),
        "follow_up": (NEW_NAME_MARKER, "{names}"),
        "follow_up_by_family": (NEW_NAME_MARKER, "{names}"),
        "follow_up_template": (
            "<combined_alphabetical_sorted>",
            "</combined_alphabetical_sorted>",
            "{template}",
        ),
        "placeholder": ("{i}",),
    },
    "reverse_text": {
        "system": ("<answer>", "</answer>", "<think>", "</think>"),
        "user": ("{text}",),
    },
    "arithmetic": {
        "system": ("\\boxed{",),
        "user": ("{expression}",),
        "reference": ("\\boxed{{{answer}}}",),
    },
}
# non-text settings a prompt block may carry (the text source of reverse_text)
PROMPT_SETTINGS: dict[str, frozenset[str]] = {
    "alphabet_sort": frozenset(),
    "reverse_text": frozenset({"faker_locale", "words", "word_separator", "sentence_end"}),
    "arithmetic": frozenset(),
}
REQUIRED_PROMPTS: dict[str, frozenset[str]] = {
    "alphabet_sort": frozenset(PROMPT_FIELDS["alphabet_sort"]),
    "reverse_text": frozenset({"system", "user"}),
    "arithmetic": frozenset(PROMPT_FIELDS["arithmetic"]),
}


@dataclass(frozen=True)
class LanguageSpec:
    """One language (or a mix of languages), validated. Picklable: no ICU or model objects."""

    code: str
    name: str
    scripts: tuple[str, ...] = ("Latin",)
    icu_locale: str | None = None
    sort_key: str = "codepoint"
    collation_strength: str = "tertiary"
    name_locale: str | None = None
    family_first: bool = False
    full_name_separator: str = " "
    consistency_weight: float = 0.0
    prompts: dict[str, dict[str, Any]] = field(default_factory=dict)
    mix: dict[str, float] = field(default_factory=dict)
    balance: bool = False

    @property
    def is_mix(self) -> bool:
        return bool(self.mix)

    @property
    def needs_language_id(self) -> bool:
        """Latin-script languages share their script: words are attributed by language id."""
        return "Latin" in self.scripts

    def prompts_for(self, env: str) -> dict[str, Any]:
        """The prompt block of one environment, or UserError when the language has none."""
        if self.is_mix:
            raise UserError(
                f"language=mix: prompts belong to each row's language; use get_spec(code) for one of "
                f"{', '.join(self.mix)}"
            )
        block = self.prompts.get(env)
        if block is None:
            raise UserError(
                f"language.prompts.{env}: language {self.code!r} has no prompts for {env}; add a "
                f"`prompts: {env}:` block to conf/language/{self.code}.yaml (see en.yaml for the keys)"
            )
        return block

    def prompt(self, env: str, key: str, **fields: Any) -> str:
        """One prompt text of an environment, with its {fields} filled in."""
        block = self.prompts_for(env)
        if key not in block:
            raise UserError(f"language.prompts.{env}.{key}: missing for language {self.code!r}")
        return str(block[key]).format(**fields) if fields else str(block[key])


def _conf_root() -> Any:
    import importlib.resources

    return importlib.resources.files(CONFIG_PACKAGE) / GROUP


@lru_cache(maxsize=1)
def _language_files() -> tuple[str, ...]:
    names = [p.name[: -len(".yaml")] for p in _conf_root().iterdir() if p.name.endswith(".yaml")]
    return tuple(sorted(names))


def available_languages() -> list[str]:
    """Codes of the single languages in conf/language/ (every option except `mix`)."""
    return [name for name in _language_files() if name != MIX]


def _unknown(code: Any) -> UserError:
    return UserError(
        f"language: unknown language {code!r}; available: {', '.join(available_languages())} (or {MIX})"
    )


@lru_cache(maxsize=64)
def get_spec(code: str) -> LanguageSpec:
    """The spec of conf/language/<code>.yaml (`mix` included); UserError listing the available
    languages for an unknown code."""
    if not isinstance(code, str) or code not in _language_files():
        raise _unknown(code)
    from omegaconf import OmegaConf

    text = (_conf_root() / f"{code}.yaml").read_text(encoding="utf-8")
    spec = spec_from_config(OmegaConf.create(text), source=f"conf/language/{code}.yaml")
    if spec.code != code:
        raise UserError(f"conf/language/{code}.yaml: code is {spec.code!r}; it must match the file name")
    return spec


def spec_from_config(cfg: Any, source: str = "language") -> LanguageSpec:
    """A validated spec from the `language` config group (DictConfig, dict or LanguageConfig)."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from grpo.config import LanguageConfig

    try:
        merged = OmegaConf.merge(OmegaConf.structured(LanguageConfig), cfg)
        data: dict[str, Any] = OmegaConf.to_container(merged, resolve=True)  # type: ignore[assignment]
    except OmegaConfBaseException as ex:
        first = str(ex).strip().splitlines()[0]
        raise UserError(f"{source}: {first}") from None
    return _build(data, source)


def _build(d: dict[str, Any], source: str) -> LanguageSpec:
    def fail(key: str, message: str) -> UserError:
        return UserError(f"{source}: language.{key}: {message}")

    code = d["code"]
    if not isinstance(code, str) or not code.strip():
        raise fail("code", "must be a language code such as 'sv'")
    try:
        scripts = check_scripts(list(d["scripts"]))
    except ValueError as ex:
        raise UserError(f"{source}: {ex}") from None
    if d["sort_key"] not in SORT_STRATEGIES:
        raise fail("sort_key", f"{d['sort_key']!r} is not one of {', '.join(SORT_STRATEGIES)}")
    if d["sort_key"] != "codepoint" and not d["icu_locale"]:
        raise fail("icu_locale", f"sort_key={d['sort_key']} needs an ICU locale such as 'sv_SE'")
    if d["collation_strength"] not in STRENGTHS:
        raise fail("collation_strength", f"{d['collation_strength']!r} is not one of {', '.join(STRENGTHS)}")
    weight = d["consistency_weight"]
    if not (math.isfinite(weight) and weight >= 0):
        raise fail("consistency_weight", f"{weight} must be >= 0 (0 disables the reward)")
    mix = {str(k): float(v) for k, v in (d["mix"] or {}).items()}
    if d["members"] is not None:
        if code != MIX and not mix:
            raise fail("members", "only language=mix has members")
        mix = {str(m): mix.get(str(m), 1.0) for m in d["members"]}
    if code == MIX or mix:
        _check_mix(mix, fail)
    prompts = d["prompts"] or {}
    if not mix:
        _check_prompts(prompts, fail)
    return LanguageSpec(
        code=code,
        name=d["name"],
        scripts=scripts,
        icu_locale=d["icu_locale"],
        sort_key=d["sort_key"],
        collation_strength=d["collation_strength"],
        name_locale=d["name_locale"],
        family_first=bool(d["family_first"]),
        full_name_separator=d["full_name_separator"],
        consistency_weight=float(weight),
        prompts=prompts,
        mix=mix,
        balance=bool(d["balance"]),
    )


def _check_mix(mix: dict[str, float], fail: Any) -> None:
    known = available_languages()
    if not mix:
        raise fail(
            "mix",
            f"list the languages to mix with their weights, e.g. {{en: 2, zh: 1}} (from {', '.join(known)})",
        )
    for member, weight in mix.items():
        if member not in known:
            raise fail(f"mix.{member}", f"unknown language; available: {', '.join(known)}")
        if not (math.isfinite(weight) and weight >= 0):
            raise fail(f"mix.{member}", f"weight {weight} must be a number >= 0")
    if sum(mix.values()) <= 0:
        raise fail("mix", "at least one language needs a weight > 0")


def _fields(text: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(text) if name is not None}


def _check_prompts(prompts: dict[str, Any], fail: Any) -> None:
    for env, block in prompts.items():
        if env not in PROMPT_FIELDS:
            continue  # a third-party environment's texts: its own code checks them
        if not isinstance(block, dict):
            raise fail(f"prompts.{env}", "must be a mapping of prompt keys to texts")
        missing = sorted(REQUIRED_PROMPTS[env] - set(block))
        if missing:
            raise fail(f"prompts.{env}", f"missing {', '.join(missing)}")
        for key, value in block.items():
            if key in PROMPT_SETTINGS[env]:
                continue
            if key not in PROMPT_FIELDS[env]:
                allowed = sorted(set(PROMPT_FIELDS[env]) | PROMPT_SETTINGS[env])
                raise fail(f"prompts.{env}.{key}", f"unknown key; allowed: {', '.join(allowed)}")
            if not isinstance(value, str):
                raise fail(f"prompts.{env}.{key}", "must be a text")
            for token in PROMPT_TOKENS[env].get(key, ()):
                if token not in value:
                    raise fail(
                        f"prompts.{env}.{key}",
                        f"must keep {token!r} verbatim (a format token the env parses)",
                    )
            if not PROMPT_FIELDS[env][key]:
                continue  # used verbatim, never formatted: braces are literal (\boxed{})
            try:
                used = _fields(value)
            except ValueError as ex:
                raise fail(
                    f"prompts.{env}.{key}", f"bad {{field}} syntax ({ex}); write {{{{ and }}}} for braces"
                ) from None
            extra = used - PROMPT_FIELDS[env][key]
            if extra:
                raise fail(f"prompts.{env}.{key}", f"unknown field(s) {{{', '.join(sorted(extra))}}}")
        if env == "reverse_text" and not (block.get("faker_locale") or block.get("words")):
            raise fail(f"prompts.{env}", "needs a text source: faker_locale (a faker lorem locale) or words")
