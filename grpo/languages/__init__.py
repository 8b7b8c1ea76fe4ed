"""Languages: specs from conf/language/*.yaml, real collation, per-language names, script and
language identification, and the language-consistency reward.

    from grpo.languages import get_spec, draw_names, sort_names, make_consistency_reward
    sv = get_spec("sv")
    names = draw_names(random.Random(0), 5, sv, part="given")   # Name(text, sort_text)
    expected = sort_names(names, sv)                             # Åsa after Zara
    reward = make_consistency_reward(sv)                         # RewardFunc "language_consistency"

Importing this package is light (no ICU, faker or fastText import until they are used).
"""

from grpo.languages.collation import collate_equal, collation_key, sort_key, sort_names
from grpo.languages.consistency import (
    REWARD_NAME,
    completion_text,
    language_consistency,
    make_consistency_reward,
    strip_uncounted,
)
from grpo.languages.mix import language_counts, language_shares, sample_languages
from grpo.languages.names import Name, NameSource, draw_names, name_source, sort_name_texts
from grpo.languages.spec import (
    MIX,
    NEW_NAME_MARKER,
    LanguageSpec,
    available_languages,
    get_spec,
    spec_from_config,
)

__all__ = [
    "MIX",
    "NEW_NAME_MARKER",
    "REWARD_NAME",
    "LanguageSpec",
    "Name",
    "NameSource",
    "available_languages",
    "collate_equal",
    "collation_key",
    "completion_text",
    "draw_names",
    "get_spec",
    "language_consistency",
    "language_counts",
    "language_shares",
    "make_consistency_reward",
    "name_source",
    "sample_languages",
    "sort_key",
    "sort_name_texts",
    "sort_names",
    "spec_from_config",
    "strip_uncounted",
]
