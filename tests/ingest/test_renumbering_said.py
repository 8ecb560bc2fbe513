"""Steps as printed; where a reader places a line that prints no step, its notes say how
(issue 39, item 5). Real logs read in place from ../shared."""

from __future__ import annotations

import pytest

from stabilitycli import read
from tests.conftest import REAL_LOGS

SHARED = REAL_LOGS.parent
DS_CHAT = REAL_LOGS / "deepspeed-chat-opt"

pytestmark = pytest.mark.skipif(not DS_CHAT.is_dir(), reason="no shared logs beside the checkout")


def test_overflow_messages_on_a_progress_bar_say_the_bar_placed_them() -> None:
    # `... 378/2724 [...][...] OVERFLOW! Rank 0 Skipping step.`: the message names no
    # iteration; the bar on its line gives the step (the note said `Grad overflow on iteration
    # N` placed them at N+1, which no line of this log prints)
    log = SHARED / "pasted-logs" / "chinese-llama-issue534-scale-halving" / "issue_excerpt.log"
    notes = read(log).source.notes
    assert any("5 by the progress bar on their line" in n for n in notes), notes
    assert not any("Grad overflow on iteration" in n for n in notes)


def test_overflow_messages_numbered_by_order_say_how() -> None:
    notes = read(
        DS_CHAT / "step1_supervised_finetuning__opt-1.3b-globalBatchSize128.log"
    ).source.notes
    placed = next(n for n in notes if n.startswith("overflow messages carry no step"))
    assert "order before the first step line, numbered 1, 2, 3, ..." in placed


def test_deepspeed_lines_without_a_step_say_where_they_went() -> None:
    notes = read(
        DS_CHAT / "step2_reward_model_finetuning__opt-350m_globalBatchSize-64.log"
    ).source.notes
    assert any(
        "print no step (evaluation, reward, epoch loss) are placed at the step line before" in n
        for n in notes
    ), notes


def test_the_engines_renumbered_to_the_ppo_numbering_is_said() -> None:
    log = DS_CHAT / "step3_rlhf_finetuning__actor_opt-1.3b_critic_opt-350m_globalBatchSize64.log"
    notes = read(log).source.notes
    assert any("placed at N-1" in n for n in notes)
