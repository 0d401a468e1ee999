"""Character-level tokenizer shared by every toy task.

Every task in :mod:`toy_envs.tasks` writes its prompts and completions with the same small
alphabet, so one vocabulary (and one model) serves all of them:

======  =====================================================================
ids     tokens
======  =====================================================================
0-2     the special tokens ``<pad>``, ``<bos>``, ``<eos>``
3-12    the digits ``0``-``9``
13-22   ``+ - * / ( ) = # ,`` and the space character
======  =====================================================================

Why character level: the tasks are arithmetic, and a character tokenizer makes the number of
tokens equal to the number of characters, so lengths in the docs ("the chain task fits in 48
tokens") are exact, and a reader can decode a tensor of ids by eye.

Why no ``<unk>`` token: text outside the alphabet never comes from a task, so meeting one is a
bug in the caller. :meth:`CharTokenizer.encode` raises ``ValueError`` by default
(``errors="strict"``) and can drop such characters instead (``errors="ignore"``).

Special tokens exist only as ids: the *text* ``"<eos>"`` is five unknown characters, never the
end-of-sequence token. Use ``add_bos``/``add_eos`` to add them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Literal

import numpy as np

PAD = "<pad>"
BOS = "<bos>"
EOS = "<eos>"
SPECIAL_TOKENS: tuple[str, ...] = (PAD, BOS, EOS)

# The smallest alphabet the four tasks need: digits, the four operators (ASCII ``*`` and ``/``
# stand for the spec's multiplication and division signs), parentheses for countdown
# expressions, ``=`` ending every prompt, ``#`` separating a scratchpad from the final answer,
# ``,`` separating scratchpad entries and countdown numbers, and a space so that a completion
# may contain readable whitespace (the countdown parser skips it).
ALPHABET = "0123456789+-*/()=#, "


class CharTokenizer:
    """Maps text over :data:`ALPHABET` to token ids and back, one id per character.

    Attributes:
        itos: id -> token string (special tokens first, then the alphabet in order).
        stoi: token string -> id (the inverse of ``itos``).
        vocab_size: ``len(itos)``.
        pad_id, bos_id, eos_id: ids of the special tokens.
    """

    def __init__(self, alphabet: str = ALPHABET) -> None:
        if len(set(alphabet)) != len(alphabet):
            raise ValueError(f"alphabet must not repeat characters, got {alphabet!r}")
        self.alphabet: str = alphabet
        self.itos: list[str] = [*SPECIAL_TOKENS, *alphabet]
        self.stoi: dict[str, int] = {token: i for i, token in enumerate(self.itos)}
        self.vocab_size: int = len(self.itos)
        self.pad_id: int = self.stoi[PAD]
        self.bos_id: int = self.stoi[BOS]
        self.eos_id: int = self.stoi[EOS]
        # Ids that never stand for a character; ``decode`` skips them by default.
        self.special_ids: frozenset[int] = frozenset(self.stoi[t] for t in SPECIAL_TOKENS)

    def __repr__(self) -> str:
        return f"CharTokenizer(vocab_size={self.vocab_size}, alphabet={self.alphabet!r})"

    # ------------------------------------------------------------------ text -> ids
    def encode(
        self,
        text: str,
        *,
        add_bos: bool = False,
        add_eos: bool = False,
        errors: Literal["strict", "ignore"] = "strict",
    ) -> list[int]:
        """Encode ``text`` as one id per character.

        Args:
            text: the string to encode.
            add_bos: prepend ``<bos>`` (prompts fed to the model start with it).
            add_eos: append ``<eos>`` (warm-start targets end with it).
            errors: what to do with a character outside the alphabet: ``"strict"`` (default)
                raises ``ValueError`` naming it; ``"ignore"`` drops it.
        """
        if not isinstance(text, str):
            raise ValueError(f"text must be a str, got {type(text).__name__}")
        if errors not in ("strict", "ignore"):
            raise ValueError(f"errors must be 'strict' or 'ignore', got {errors!r}")
        ids: list[int] = [self.bos_id] if add_bos else []
        for position, char in enumerate(text):
            # A single character can never equal a special token's multi-character name.
            token_id = self.stoi.get(char)
            if token_id is None:
                if errors == "ignore":
                    continue
                raise ValueError(
                    f"text has character {char!r} at position {position} outside the "
                    f"tokenizer alphabet {self.alphabet!r} (pass errors='ignore' to drop it)"
                )
            ids.append(token_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    # ------------------------------------------------------------------ ids -> text
    def decode(
        self,
        ids: Iterable[int],
        *,
        skip_special: bool = True,
        stop_at_eos: bool = True,
    ) -> str:
        """Decode token ids to text.

        Args:
            ids: any iterable of integer ids (list, numpy array, 1-D torch tensor).
            skip_special: drop ``<pad>``/``<bos>``/``<eos>`` (default); otherwise render them as
                their names, e.g. ``"<bos>12+34=46<eos>"``.
            stop_at_eos: ignore everything after the first ``<eos>`` (default). This is how a
                sampled completion becomes the text the verifier scores: the model may keep
                emitting tokens after ``<eos>`` inside a padded batch, and they do not count.

        Raises:
            ValueError: if an id is not an integer in ``[0, vocab_size)``.
        """
        pieces: list[str] = []
        for raw in ids:
            token_id = int(raw)
            if token_id != raw or not 0 <= token_id < self.vocab_size:
                raise ValueError(f"ids must be integers in [0, {self.vocab_size}), got {raw!r}")
            is_eos = token_id == self.eos_id
            if not (skip_special and token_id in self.special_ids):
                pieces.append(self.itos[token_id])
            if is_eos and stop_at_eos:
                break
        return "".join(pieces)

    # ------------------------------------------------------------------ batching
    def pad(
        self,
        seqs: Sequence[Sequence[int]],
        side: Literal["left", "right"] = "right",
        *,
        length: int | None = None,
    ) -> tuple[np.ndarray, np.ndarray]:
        """Pad variable-length id lists into one rectangular batch.

        Args:
            seqs: ``n`` sequences of ids.
            side: ``"right"`` puts padding after the tokens (training targets);
                ``"left"`` puts it before them (prompts for batched generation, so that every
                row's last prompt token sits in the same column).
            length: pad to this many columns (default: the longest sequence). Must be at least
                the longest sequence's length.

        Returns:
            ``(ids, mask)``: ``ids`` is int64 ``[n, L]`` filled with ``pad_id`` outside the
            tokens, ``mask`` is float32 ``[n, L]``, 1.0 on tokens and 0.0 on padding.
        """
        if side not in ("left", "right"):
            raise ValueError(f"side must be 'left' or 'right', got {side!r}")
        longest = max((len(s) for s in seqs), default=0)
        if length is None:
            length = longest
        elif length < longest:
            raise ValueError(f"length must be >= the longest sequence ({longest}), got {length}")
        ids = np.full((len(seqs), length), self.pad_id, dtype=np.int64)
        mask = np.zeros((len(seqs), length), dtype=np.float32)
        for row, seq in enumerate(seqs):
            if len(seq) == 0:
                continue
            # Left padding: the tokens occupy the last len(seq) columns.
            start = length - len(seq) if side == "left" else 0
            ids[row, start : start + len(seq)] = np.asarray(seq, dtype=np.int64)
            mask[row, start : start + len(seq)] = 1.0
        return ids, mask


#: The single vocabulary shared by all tasks, environments, models and trainers.
TOKENIZER = CharTokenizer()
