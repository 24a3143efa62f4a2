"""Which first answer tokens mean which answer option, and the option distribution they give.

Every probability in docs/metrics.md is the next-token distribution at the assistant turn,
restricted to the request's options (option letters, Yes/No, True/False) and
renormalised over them. A model can say option "A" with several different first tokens
(``A``, `` A``, ``a``...), so each option's probability is the summed probability of
every token that spells it. Backends see tokens in one of two ways:

- by id (transformers, vLLM offline): :func:`option_token_ids` asks the tokenizer which
  single tokens spell each option;
- by text (an OpenAI-compatible server's ``top_logprobs``): :func:`option_of_token`
  reads a token's text.

Both count the same spellings, so that one model scores the same through any backend:
the option as written, lower-case, upper-case and capitalised (deduplicated), each as
is or after a space. Decisions for the text path:

- whitespace around the token and the tokenizers' space markers (SentencePiece ``▁``,
  GPT-2 byte-level ``Ġ``/``Ċ``/``ĉ``) are ignored: servers return either the decoded
  text (`` A``) or the raw piece (``ĠA``), and a SentencePiece piece ``▁A`` decodes to
  plain ``A``;
- case follows the spelling list above rather than a full case-insensitive match: for
  one-letter options the two are the same, and for words it keeps the text path counting
  exactly the tokens the id path counts (``yES`` is in neither);
- punctuation is *not* stripped (``A.``, ``(A``, ``A)`` are not option A): the id path
  cannot count them either (a tokenizer does not encode "A" as ``A.``), and in the usual
  vocabularies the first token of "A." is "A" anyway, so its mass is already counted.
  Servers that return token ids as text (vLLM's ``return_tokens_as_token_ids``) are not
  readable here: every token maps to no option.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import lru_cache
from typing import Protocol

import numpy as np

from vlgate.evaluators.backends.base import BackendError, renormalise

#: Characters tokenizers use in a token's raw text for whitespace.
WHITESPACE_MARKERS = str.maketrans({"▁": " ", "Ġ": " ", "Ċ": "\n", "ĉ": "\t"})


class OptionTokenizer(Protocol):
    """What :func:`option_token_ids` asks of a tokenizer (any Hugging Face tokenizer, vLLM's)."""

    @property
    def unk_token_id(self) -> int | None: ...

    def encode(self, text: str, *, add_special_tokens: bool) -> list[int]: ...


def option_spellings(option: str) -> tuple[str, ...]:
    """The case variants that spell ``option``: as written, lower, upper, capitalised (no repeats)."""
    return tuple(dict.fromkeys((option, option.lower(), option.upper(), option.capitalize())))


def first_token_texts(option: str) -> tuple[str, ...]:
    """Every text that, as one first answer token, means ``option``: each spelling as is and after a space."""
    return tuple(text for spelling in option_spellings(option) for text in (spelling, " " + spelling))


def option_token_ids(tokenizer: OptionTokenizer, options: Sequence[str]) -> list[list[int]]:
    """For each option, the ids of every single token among :func:`first_token_texts`.

    ``tokenizer`` needs ``encode(text, add_special_tokens=False)`` and ``unk_token_id``
    (any Hugging Face tokenizer). An option no variant of which is one token falls back
    to the first token of its plain encoding. Options that share a token cannot be told
    apart from one distribution: that is an error.
    """
    ids: list[list[int]] = []
    for option in options:
        found: list[int] = []
        for text in first_token_texts(option):
            encoded = tokenizer.encode(text, add_special_tokens=False)
            if len(encoded) == 1 and encoded[0] != tokenizer.unk_token_id and encoded[0] not in found:
                found.append(encoded[0])
        if not found:
            encoded = tokenizer.encode(option, add_special_tokens=False)
            if not encoded:
                raise BackendError(f"option {option!r} encodes to no token")
            found = [encoded[0]]
        ids.append(found)
    owner: dict[int, str] = {}
    for option, option_ids in zip(options, ids):
        for token_id in option_ids:
            if owner.setdefault(token_id, option) != option:
                raise BackendError(f"options {owner[token_id]!r} and {option!r} share their first token; cannot score them apart")
    return ids


@lru_cache(maxsize=256)
def _spelling_owners(options: tuple[str, ...]) -> dict[str, int]:
    """spelling → index of the option it spells; options sharing a spelling are an error."""
    owners: dict[str, int] = {}
    for index, option in enumerate(options):
        for spelling in option_spellings(option.strip()):
            if owners.setdefault(spelling, index) != index:
                raise BackendError(f"options {options[owners[spelling]]!r} and {option!r} are spelled the same; cannot score them apart")
    return owners


def normalise_token_text(token_text: str) -> str:
    """A token's text without the tokenizer's whitespace markers and surrounding whitespace."""
    return token_text.translate(WHITESPACE_MARKERS).strip()


def option_of_token(token_text: str, options: Sequence[str]) -> str | None:
    """The option that ``token_text`` means as a first answer token, or None (see the module docstring)."""
    index = _spelling_owners(tuple(options)).get(normalise_token_text(token_text))
    return None if index is None else options[index]


def _pairs(logprobs_by_token: Mapping[str, float] | Iterable[tuple[str, float]]) -> Iterable[tuple[str, float]]:
    return logprobs_by_token.items() if isinstance(logprobs_by_token, Mapping) else logprobs_by_token


def option_masses_from_logprobs(logprobs_by_token: Mapping[str, float] | Iterable[tuple[str, float]], options: Sequence[str]) -> np.ndarray:
    """Unnormalised: for each option, the summed probability of the tokens that mean it.

    Accepts a mapping token text → logprob or (token text, logprob) pairs; pairs keep two
    distinct tokens that decode to the same text (a server's ``top_logprobs`` can hold
    both ``▁A`` and ``A`` as "A"), a mapping would keep one of them.
    """
    owners = _spelling_owners(tuple(options))
    masses = np.zeros(len(options), dtype=np.float64)
    for token_text, logprob in _pairs(logprobs_by_token):
        index = owners.get(normalise_token_text(token_text))
        if index is not None:
            masses[index] += math.exp(logprob)
    return masses


def probabilities_from_logprobs(logprobs_by_token: Mapping[str, float] | Iterable[tuple[str, float]], options: Sequence[str]) -> np.ndarray:
    """The option distribution: :func:`option_masses_from_logprobs` renormalised over the
    options (uniform when no token of any option is present)."""
    return renormalise(option_masses_from_logprobs(logprobs_by_token, options))


def option_masses_from_token_ids(logprobs_by_id: Mapping[int, float], option_ids: Sequence[Sequence[int]]) -> np.ndarray:
    """Unnormalised: for each option, the summed probability of its token ids present in
    ``logprobs_by_id`` (an absent id, outside a top-k list, counts 0)."""
    return np.array([sum(math.exp(logprobs_by_id[i]) for i in ids if i in logprobs_by_id) for ids in option_ids], dtype=np.float64)
