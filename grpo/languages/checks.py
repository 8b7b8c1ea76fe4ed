"""The settings rule of the language group, walked by the registry grpo/cli/checks.py."""

from __future__ import annotations

from grpo.config import LanguageConfig


def check_language(language: LanguageConfig) -> None:
    """The language group's own rules (a known sort key, an ICU locale where one is needed, known
    mix members, ...) are the invariants of a LanguageSpec and live with it: building the spec
    runs them, here before anything heavy."""
    from grpo.languages.spec import spec_from_config

    spec_from_config(language)
