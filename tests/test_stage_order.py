"""The pipeline's stage order is written once (``batch_stages.prepare_update``) and every
driver calls it: shaping → advantages → overlong filter → ``Config.for_update``.

The behavioural tests use GTPO, whose token rewards share the group's entropy mass among
the tokens in the mask: an overlong filter applied before the advantages would change the
other rows' advantages, so the order is visible in the numbers."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest
import torch

from refimpl import batch_stages, contract
from refimpl.algorithms import dapo, gtpo

ROOT = Path(__file__).resolve().parents[1]
G, T, L_MAX = 4, 5, 5

#: Every driver between a sampler and an optimizer: the reader's loop, the Trainer, the HF
#: loop, TRL, verl, and the credit study's first update.
DRIVERS = ["refimpl/loop.py", "refimpl/train.py", "refimpl/scaleup/hf_by_hand.py",
           "refimpl/scaleup/trl.py", "refimpl/scaleup/verl.py", "refimpl/bench/credit_batch.py"]  # fmt: skip
#: The stages prepare_update runs; a driver that calls one itself writes the order again.
STAGES = {"shape_rewards", "overlong_filter", "kept_group_advantages", "split_groups", "advantages"}


def batch() -> contract.RolloutBatch:
    """Two groups of G = 4; row 1 hit L_max without EOS (truncated), rows 5 and 6 are short."""
    gen = torch.Generator().manual_seed(3)
    lengths = torch.tensor([3, 5, 2, 4, 5, 1, 2, 3])
    mask = (torch.arange(T)[None, :] < lengths[:, None]).float()
    return contract.RolloutBatch(
        response_ids=torch.zeros(8, T, dtype=torch.long),
        response_mask=mask,
        rewards=torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 0.0, 1.0, 0.0]),
        logp_old=-torch.rand(8, T, generator=gen) * mask,
        entropy_old=(0.1 + torch.rand(8, T, generator=gen)) * mask,
        group_size=G,
    )


TRUNCATED = torch.tensor([False, True, False, False, False, False, False, False])


def test_the_truncated_row_counts_in_the_advantages_and_leaves_the_loss():
    cfg = dataclasses.replace(gtpo.Config(), overlong_filter=True)
    b = batch()
    prepared = batch_stages.prepare_update(gtpo, b, cfg, max_len=L_MAX, truncated=TRUNCATED)
    torch.testing.assert_close(prepared.advantages, gtpo.advantages(b, cfg))
    # the filter first would have given other advantages (the test can see the order)
    filtered = b.replace(response_mask=b.response_mask * ~TRUNCATED[:, None])
    assert not torch.allclose(gtpo.advantages(filtered, cfg)[0], prepared.advantages[0])
    assert prepared.batch.response_mask[1].sum() == 0
    assert torch.equal(prepared.batch.response_mask[~TRUNCATED], b.response_mask[~TRUNCATED])
    assert prepared.cfg == cfg.for_update(prepared.batch, prepared.advantages)


def test_shaping_comes_before_the_advantages_and_the_outcome_is_kept():
    """DAPO's defaults shape (Eq. 13, L_cache = round(0.2·5) = 1): the two rows of length 5
    lose 0.5 of reward; the advantages are those of the shaped rewards, success the outcome's."""
    cfg = dapo.Config()
    b = batch()
    prepared = batch_stages.prepare_update(dapo, b, cfg, max_len=L_MAX, truncated=TRUNCATED)
    shaped = torch.tensor([1.0, 0.5, 0.0, 0.0, 0.5, 0.0, 1.0, 0.0])
    torch.testing.assert_close(prepared.batch.rewards, shaped)
    assert torch.equal(prepared.batch.outcome_rewards, b.rewards)
    expected = dapo.advantages(b.replace(rewards=shaped, outcome_rewards=b.rewards), cfg)
    torch.testing.assert_close(prepared.advantages, expected)
    assert not torch.allclose(prepared.advantages, dapo.advantages(b, cfg))


def test_keep_zeroes_the_dropped_groups_in_advantages_and_loss_mask():
    cfg = dataclasses.replace(gtpo.Config(), overlong_filter=False)
    b = batch()
    keep = torch.tensor([False, True])
    prepared = batch_stages.prepare_update(gtpo, b, cfg, max_len=None, truncated=None, keep=keep)
    assert prepared.advantages[:G].abs().sum() == 0 and prepared.batch.response_mask[:G].sum() == 0
    torch.testing.assert_close(prepared.advantages[G:], gtpo.advantages(b.select_groups(keep), cfg))
    assert torch.equal(prepared.batch.rewards, b.rewards)  # max_len None: no shaping here


def test_minibatches_are_whole_groups_covering_the_batch_once():
    b = batch()
    parts = list(batch_stages.minibatches(b, 2))
    assert [int(rows.sum()) for _, rows in parts] == [G, G]
    assert torch.equal(sum(rows.long() for _, rows in parts), torch.ones(8, dtype=torch.long))
    for minibatch, rows in parts:
        assert torch.equal(minibatch.rewards, b.rewards[rows])


@pytest.mark.parametrize("path", DRIVERS)
def test_every_driver_calls_prepare_update_and_no_stage_itself(path):
    tree = ast.parse((ROOT / path).read_text())
    called = {
        node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
    }
    assert "prepare_update" in called, f"{path} does not call batch_stages.prepare_update"
    assert not called & STAGES, f"{path} runs {sorted(called & STAGES)} itself"
