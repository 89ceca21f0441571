"""The measured window: warmup excluded, time between epochs excluded, sync on the loss."""

import pytest

from kbench.measure.stats import percentiles
from kbench.run.trainer import StepClock


def clock_with(epochs, warmup):
    """A clock fed fixed timestamps: each epoch is a list of (begin, end) per step."""
    clock = StepClock(warmup_steps=warmup)
    for steps in epochs:
        clock.epoch_begin()
        for begin, end in steps:
            clock.begins.append(begin)
            clock.ends.append(end)
    return clock


def test_window_opens_when_the_last_warmup_step_ends():
    clock = clock_with([[(0, 5), (5, 6), (6, 7), (7, 8)]], warmup=1)
    assert clock.measured_seconds() == pytest.approx(8 - 5)


def test_gap_between_epochs_is_not_measured():
    epochs = [[(0, 5), (5, 6), (6, 7)], [(100, 101), (101, 102)]]
    clock = clock_with(epochs, warmup=1)
    assert clock.measured_seconds() == pytest.approx((7 - 5) + (102 - 100))


def test_warmup_ending_on_an_epoch_boundary():
    epochs = [[(0, 5), (5, 6)], [(50, 52), (52, 53)]]
    assert clock_with(epochs, warmup=2).measured_seconds() == pytest.approx(53 - 50)


def test_without_warmup_the_window_starts_at_the_first_step():
    assert clock_with([[(1, 5), (5, 6)]], warmup=0).measured_seconds() == pytest.approx(5)


def test_batch_end_reads_the_loss_on_the_host():
    class Lazy:
        read = False

        def __float__(self):
            Lazy.read = True
            return 0.25

    clock = StepClock(warmup_steps=0)
    clock.epoch_begin()
    clock.batch_begin()
    clock.batch_end({"loss": Lazy()})
    assert Lazy.read and clock.losses == [0.25] and len(clock.ends) == 1


def test_percentiles():
    stats = percentiles([1.0, 2.0, 3.0, 4.0, 5.0])
    assert stats["p50"] == 3.0 and stats["mean"] == 3.0
    assert stats["p10"] == pytest.approx(1.4) and stats["p90"] == pytest.approx(4.6)


def test_img_per_s_percentiles_are_one_definition_in_the_trainer_and_for_a_script():
    """Percentiles of each step's own rate, in a kbench worker (the step clock) and for a
    user's script (Keras' events): once the trainer inverted step-time percentiles
    (batch / p90 time, 4 / 3.4 = 1.18 img/s here, not 1.6) and the script's were these."""
    from kbench.measure.keras_events import summarize
    from kbench.measure.stats import rate_percentiles
    from kbench.run.trainer import step_metrics

    steps = [(0, 1), (1, 2), (2, 3), (3, 7)]  # a warmup step, then 1, 1 and 4 s
    wanted = rate_percentiles([4, 4, 4], [1, 1, 4])
    assert wanted["p10"] == pytest.approx(1 + 0.2 * 3) and wanted["p50"] == 4.0
    trained = step_metrics(clock_with([steps], warmup=1), batch_size=4)
    assert trained["images_per_sec_per_step"] == wanted
    events = [{"event": "batch", "stage": "train", "t0": b, "t1": e, "size": 4} for b, e in steps]
    assert summarize(events, warmup_steps=1)["images_per_sec_per_step"] == wanted
