"""The learning rate over a run's budget (spacy_elmo.training.loop.schedule) and the settings that drive it."""

from itertools import pairwise

import pytest
import typer

from spacy_elmo.training.loop.schedule import budget_spent, scheduled_lr
from spacy_elmo.training.loop.train_config import TrainConfig


def test_warmup_cosine_rises_over_the_warmup_then_falls_to_the_final_fraction():
    rates = [scheduled_lr("warmup-cosine", 0.01, spent / 100, warmup=0.1, final=0.2) for spent in range(101)]
    assert rates[0] == 0.0
    assert rates[10] == pytest.approx(0.01)
    assert all(a < b for a, b in pairwise(rates[:11])), "rises through the warm-up"
    assert all(a > b for a, b in pairwise(rates[10:])), "falls after it"
    assert rates[55] == pytest.approx(0.01 * (0.2 + 0.8 * 0.5)), "half way through the decay: half way down"
    assert rates[100] == pytest.approx(0.002)


def test_constant_is_the_rate_itself_with_or_without_a_budget():
    assert scheduled_lr("constant", 0.2, 0.7, warmup=0.05, final=0.1) == 0.2
    assert scheduled_lr("constant", 0.2, None, warmup=0.05, final=0.1) == 0.2


def test_the_budget_spent_is_the_larger_of_time_and_steps():
    assert budget_spent(elapsed_s=270, step=10, max_minutes=9, max_steps=0) == pytest.approx(0.5)
    assert budget_spent(elapsed_s=270, step=80, max_minutes=9, max_steps=100) == pytest.approx(0.8)
    assert budget_spent(elapsed_s=600, step=80, max_minutes=9, max_steps=100) == 1.0, "capped at the end"
    assert budget_spent(elapsed_s=600, step=80, max_minutes=0, max_steps=0) is None


def test_a_schedule_over_the_budget_without_a_budget_is_refused():
    with pytest.raises(ValueError, match="has none.*max_minutes=0, max_steps=0.*set max_minutes or max_steps"):
        TrainConfig(lr_schedule="warmup-cosine")
    assert TrainConfig(lr_schedule="warmup-cosine", max_minutes=9).max_minutes == 9


@pytest.mark.parametrize(
    "settings, named",
    [
        (dict(warmup=1.0), "warmup=1.0"),
        (dict(final_lr=-0.1), "final_lr=-0.1"),
        (dict(eval_every=0, eval_minutes=0), "eval_every=0, eval_minutes=0"),
    ],
)
def test_fractions_and_evaluation_pace_out_of_range_are_refused_with_their_values(settings, named):
    with pytest.raises(ValueError, match=named):
        TrainConfig(max_steps=10, **settings)


def test_an_unknown_schedule_is_refused_naming_the_known_ones():
    with pytest.raises(typer.BadParameter, match="lr_schedule must be one of .*'constant', 'warmup-cosine'.*'linear'"):
        TrainConfig.load(None, ["lr_schedule=linear"])
    with pytest.raises(typer.BadParameter, match="has none"):
        TrainConfig.load(None, ["lr_schedule=warmup-cosine"])
