"""Language specs: what the code needs to know about a language, read from conf/language/*.yaml.

A run's language comes from the composed config (`spec_from_config(cfg.language)`, overrides
included); `get_spec(code)` reads one language file directly (the members of language=mix, tests,
tools); `as_spec` takes either. Both go through the structured schema `grpo.config.LanguageConfig`
(the one source of every default: a language file holds only what differs), so a typo in a
language file is caught the same way as on the command line. Light module: no ICU, faker or
fastText import here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from grpo.errors import UserError
from grpo.languages.script import check_scripts

MIX = "mix"
# how names sort (grpo/languages/collation.py) and the ICU collation strengths
SORT_STRATEGIES = ("codepoint", "icu", "icu_reading")
STRENGTHS = ("primary", "secondary", "tertiary", "quaternary", "identical")
CONFIG_PACKAGE = "grpo.conf"
GROUP = "language"


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
    mix: dict[str, float] = field(default_factory=dict)
    balance: bool = False

    @property
    def is_mix(self) -> bool:
        return bool(self.mix)

    @property
    def needs_language_id(self) -> bool:
        """Latin-script languages share their script: words are attributed by language id."""
        return "Latin" in self.scripts


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
    """A validated spec from the `language` config group: a LanguageConfig, a dict or a DictConfig."""
    from omegaconf import OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from grpo.config import LanguageConfig

    if not isinstance(cfg, (Mapping, LanguageConfig)):
        raise UserError(
            f"{source}: expected a language code such as 'en' or the language config, got {cfg!r}"
        )
    try:
        merged = OmegaConf.merge(OmegaConf.structured(LanguageConfig), cfg)
        data: dict[str, Any] = OmegaConf.to_container(merged, resolve=True)  # type: ignore[assignment]
    except OmegaConfBaseException as ex:
        first = str(ex).strip().splitlines()[0]
        raise UserError(f"{source}: {first}") from None
    return _build(data, source)


def as_spec(language: LanguageSpec | str | Any) -> LanguageSpec:
    """The spec of a language given as a LanguageSpec, a code of conf/language (or `mix`), or the
    `language` config group (a LanguageConfig, dict or DictConfig: overrides included)."""
    if isinstance(language, LanguageSpec):
        return language
    if isinstance(language, str):
        return get_spec(language)
    return spec_from_config(language)


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


def language_override(languages: Sequence[str]) -> str:
    """The language= override(s) of a command line that runs in `languages`."""
    if len(languages) == 1:
        return f"language={languages[0]}"
    return f"language=mix 'language.members=[{','.join(languages)}]'"
