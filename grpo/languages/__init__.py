"""Languages: specs from conf/language/*.yaml, real collation, per-language names, script and
language identification, and the language-consistency score.

    from grpo.languages import get_spec, draw_names, sort_names, language_consistency
    sv = get_spec("sv")
    names = draw_names(random.Random(0), 5, sv, part="given")   # Name(text, sort_text)
    expected = sort_names(names, sv)                             # Åsa after Zara
    share = language_consistency("Jag sorterar namnen.", sv)     # 1.0

This package names no environment and imports neither grpo.envs nor grpo.rewards (the reward
function built on the score is grpo/rewards/consistency.py). Importing it is light (no ICU, faker
or fastText import until they are used).
"""

from grpo.languages.collation import collate_equal, collation_key, sort_key, sort_names
from grpo.languages.consistency import language_consistency, strip_uncounted
from grpo.languages.mix import language_counts, language_shares, sample_languages
from grpo.languages.names import Name, NameSource, draw_names, name_source, sort_name_texts
from grpo.languages.spec import (
    MIX,
    LanguageSpec,
    as_spec,
    available_languages,
    get_spec,
    language_override,
    spec_from_config,
)

__all__ = [
    "MIX",
    "LanguageSpec",
    "Name",
    "NameSource",
    "as_spec",
    "available_languages",
    "collate_equal",
    "collation_key",
    "draw_names",
    "get_spec",
    "language_override",
    "language_consistency",
    "language_counts",
    "language_shares",
    "name_source",
    "sample_languages",
    "sort_key",
    "sort_name_texts",
    "sort_names",
    "spec_from_config",
    "strip_uncounted",
]
