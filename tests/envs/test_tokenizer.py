"""The character tokenizer: one vocabulary, exact round trips, documented failure modes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from toy_envs.tokenizer import ALPHABET, TOKENIZER, CharTokenizer

alphabet_text = st.text(alphabet=ALPHABET, max_size=80)


def test_vocabulary_is_consistent() -> None:
    """itos and stoi are inverse, the specials are distinct ids, the alphabet covers the tasks."""
    assert TOKENIZER.vocab_size == len(TOKENIZER.itos) == len(TOKENIZER.stoi)
    assert all(TOKENIZER.stoi[token] == i for i, token in enumerate(TOKENIZER.itos))
    assert len({TOKENIZER.pad_id, TOKENIZER.bos_id, TOKENIZER.eos_id}) == 3
    for char in "0123456789+-*/()=#, ":
        assert char in TOKENIZER.stoi, char
    assert all(isinstance(i, int) for i in (TOKENIZER.pad_id, TOKENIZER.bos_id, TOKENIZER.eos_id))


@given(alphabet_text)
def test_round_trip(text: str) -> None:
    """decode(encode(s)) == s for any string over the alphabet, one id per character."""
    ids = TOKENIZER.encode(text)
    assert len(ids) == len(text)
    assert all(0 <= i < TOKENIZER.vocab_size for i in ids)
    assert TOKENIZER.decode(ids) == text


@given(alphabet_text)
def test_round_trip_with_specials(text: str) -> None:
    """<bos>/<eos> are added as ids around the text and skipped when decoding."""
    ids = TOKENIZER.encode(text, add_bos=True, add_eos=True)
    assert ids[0] == TOKENIZER.bos_id and ids[-1] == TOKENIZER.eos_id
    assert len(ids) == len(text) + 2
    assert TOKENIZER.decode(ids) == text
    assert TOKENIZER.decode(ids, skip_special=False) == f"<bos>{text}<eos>"


@given(alphabet_text, alphabet_text)
def test_decode_stops_at_first_eos(before: str, after: str) -> None:
    """Tokens after the first <eos> are dropped unless stop_at_eos=False."""
    ids = TOKENIZER.encode(before, add_eos=True) + TOKENIZER.encode(after, add_eos=True)
    assert TOKENIZER.decode(ids) == before
    assert TOKENIZER.decode(ids, stop_at_eos=False) == before + after


def test_decode_accepts_numpy_and_rejects_bad_ids() -> None:
    ids = np.array(TOKENIZER.encode("12+3="), dtype=np.int64)
    assert TOKENIZER.decode(ids) == "12+3="
    for bad in ([TOKENIZER.vocab_size], [-1], [1.5]):
        with pytest.raises(ValueError, match="ids"):
            TOKENIZER.decode(bad)


@given(st.text(max_size=40))
def test_unknown_characters(text: str) -> None:
    """Strict mode raises ValueError on a character outside the alphabet; ignore mode drops it."""
    known = "".join(c for c in text if c in ALPHABET)
    assert TOKENIZER.encode(text, errors="ignore") == TOKENIZER.encode(known)
    if known != text:
        with pytest.raises(ValueError, match="outside the tokenizer alphabet"):
            TOKENIZER.encode(text)
    else:
        assert TOKENIZER.decode(TOKENIZER.encode(text)) == text


def test_special_token_names_are_not_special_text() -> None:
    """The text "<eos>" is not the <eos> token: it holds characters outside the alphabet."""
    with pytest.raises(ValueError):
        TOKENIZER.encode("<eos>")
    with pytest.raises(ValueError, match="errors"):
        TOKENIZER.encode("1", errors="replace")  # type: ignore[arg-type]


@given(st.lists(st.lists(st.integers(3, TOKENIZER.vocab_size - 1), max_size=12), max_size=6))
def test_pad(seqs: list[list[int]]) -> None:
    """Both sides: int64/float32 [n, L], mask marks exactly the tokens, pad_id elsewhere."""
    longest = max((len(s) for s in seqs), default=0)
    for side in ("left", "right"):
        ids, mask = TOKENIZER.pad(seqs, side=side)
        assert ids.dtype == np.int64 and mask.dtype == np.float32
        assert ids.shape == mask.shape == (len(seqs), longest)
        assert np.all(ids[mask == 0] == TOKENIZER.pad_id)
        for row, seq in enumerate(seqs):
            assert mask[row].sum() == len(seq)
            assert ids[row][mask[row] == 1].tolist() == seq
            if seq and side == "left":
                assert mask[row, -1] == 1.0  # left padding right-aligns the tokens
            if seq and side == "right":
                assert mask[row, 0] == 1.0


def test_pad_length_and_side_checked() -> None:
    ids, mask = TOKENIZER.pad([[4, 5]], side="right", length=5)
    assert ids.shape == (1, 5) and mask.tolist() == [[1, 1, 0, 0, 0]]
    with pytest.raises(ValueError, match="length"):
        TOKENIZER.pad([[4, 5, 6]], length=2)
    with pytest.raises(ValueError, match="side"):
        TOKENIZER.pad([[4]], side="middle")  # type: ignore[arg-type]


def test_alphabet_must_not_repeat() -> None:
    with pytest.raises(ValueError, match="repeat"):
        CharTokenizer("0012")
