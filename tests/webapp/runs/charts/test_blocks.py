"""The runs' metrics column by column (webapp/runs/charts/blocks.py): what a read of blocks returns is
what the rows say, through live steps, late steps, a resume's replaced steps and old runs."""

import datetime
import math

import numpy as np
import pytest
from django.core.management import call_command
from django.utils import timezone

from tests.webapp.runs.seeding import ingest, make_run
from webapp.runs.charts import blocks as series_store
from webapp.runs.charts import series
from webapp.runs.charts.blocks import BLOCK_STEPS, decode_block, encode_block, read_table, table_from_rows
from webapp.runs.models import SeriesBlock, StepMetric
from webapp.runs.services import run_discard_steps_after

pytestmark = pytest.mark.django_db


def events(steps, *, attempt=1, offset=0.0):
    for step in steps:
        metrics = {"reward/mean": math.sin(step / 40.0) + offset, "completion_tokens": 10 + step % 3,
                   "kl": None if step % 7 == 0 else step / 1000}
        if step % 100 == 0:
            metrics["eval/reward/mean"] = step / 1000  # a key only some steps have
        yield {"type": "step", "attempt": attempt, "step": step, "metrics": metrics}


def from_rows(run) -> dict[str, tuple[list, list]]:
    """Every series as the rows alone say (per key, the newest seq wins a step)."""
    rows = StepMetric.objects.filter(run=run).order_by("seq").values_list("seq", "step", "created_at", "metrics")
    table = table_from_rows(rows)
    return {k: (table.column(k)[0].tolist(), table.column(k)[1].tolist()) for k in table.keys}


def from_blocks(run, **window) -> dict[str, tuple[list, list]]:
    table = read_table(run.pk, **window)
    return {k: (table.column(k)[0].tolist(), table.column(k)[1].tolist()) for k in table.keys}


def same(a: dict, b: dict) -> bool:
    if a.keys() != b.keys():
        return False
    return all(a[k][0] == b[k][0] and np.array_equal(a[k][1], b[k][1], equal_nan=True) for k in a)


def ingest_in_batches(run, steps, batch=37, **kw):
    steps = list(steps)
    for i in range(0, len(steps), batch):
        ingest(run, events(steps[i:i + batch], **kw))


def test_the_ingest_stores_every_block_the_run_has_left_and_a_read_matches_the_rows(owner):
    run = make_run(owner)
    ingest_in_batches(run, range(1, 3 * BLOCK_STEPS + 20))
    assert sorted(SeriesBlock.objects.filter(run=run).values_list("block", flat=True)) == [0, 1, 2]  # 3 is live
    assert same(from_blocks(run), from_rows(run))
    table = read_table(run.pk)
    assert table.steps.tolist() == list(range(1, 3 * BLOCK_STEPS + 20))
    assert table.last_seq == StepMetric.objects.filter(run=run).count()
    eval_steps, eval_values = table.column("eval/reward/mean")
    assert eval_steps.tolist() == [100, 200, 300, 400, 500, 600, 700]
    kl_steps, kl_values = table.column("kl")
    assert 7 in kl_steps.tolist() and math.isnan(kl_values[kl_steps.tolist().index(7)])  # a null is a gap


def test_a_window_reads_only_what_it_asks_for_and_matches_the_rows(owner):
    run = make_run(owner)
    ingest_in_batches(run, range(1, 4 * BLOCK_STEPS), batch=200)
    whole = from_rows(run)
    for lo, hi in ((1, 10), (250, 530), (BLOCK_STEPS, 2 * BLOCK_STEPS - 1), (700, None), (None, 300),
                   (0, 2**62), (2**62, None)):  # a range past the block column's 32 bits reads as unbounded
        window = from_blocks(run, from_step=lo, to_step=hi)
        for key, (steps, values) in window.items():
            keep = [i for i, s in enumerate(whole[key][0]) if (lo is None or s >= lo) and (hi is None or s <= hi)]
            assert steps == [whole[key][0][i] for i in keep]
            assert np.array_equal(values, [whole[key][1][i] for i in keep], equal_nan=True)


def test_a_late_step_rewrites_the_block_it_lands_in(owner):
    run = make_run(owner)
    ingest_in_batches(run, [s for s in range(1, 2 * BLOCK_STEPS + 5) if s != 40])
    ingest(run, events([40]))  # an SDK run sends step 40 after the others
    assert same(from_blocks(run), from_rows(run))
    assert 40 in read_table(run.pk).column("reward/mean")[0].tolist()


def test_a_resumed_attempt_replaces_the_steps_after_its_checkpoint(owner):
    run = make_run(owner)
    ingest_in_batches(run, range(1, 3 * BLOCK_STEPS))
    run_discard_steps_after(run, attempt=2, step=300)  # attempt 2 starts after the checkpoint of step 300
    ingest_in_batches(run, range(301, 400), attempt=2, offset=5.0)
    assert same(from_blocks(run), from_rows(run))
    steps, values = read_table(run.pk).column("reward/mean")
    assert steps.tolist() == list(range(1, 400))
    assert values[steps.tolist().index(299)] == pytest.approx(math.sin(299 / 40.0))  # attempt 1's
    assert values[steps.tolist().index(350)] == pytest.approx(math.sin(350 / 40.0) + 5.0)  # attempt 2's


def test_a_run_stored_before_blocks_existed_is_read_from_its_rows_until_the_command_writes_them(owner):
    run = make_run(owner)
    now = timezone.now()
    StepMetric.objects.bulk_create([StepMetric(run=run, attempt=1, step=e["step"], seq=e["step"], metrics=e["metrics"],
                                               created_at=now + datetime.timedelta(seconds=e["step"]))
                                    for e in events(range(1, 2 * BLOCK_STEPS + 9))])
    assert not SeriesBlock.objects.filter(run=run).exists()
    before = from_blocks(run)
    assert same(before, from_rows(run))
    call_command("series_blocks", str(run.pk))
    assert sorted(SeriesBlock.objects.filter(run=run).values_list("block", flat=True)) == [0, 1]
    assert same(from_blocks(run), before)


def test_the_axes_of_a_window_count_the_tokens_of_every_step_before_it(owner):
    run = make_run(owner)
    ingest_in_batches(run, range(1, 3 * BLOCK_STEPS + 10), batch=100)
    expected = np.cumsum([10 + s % 3 for s in range(1, 3 * BLOCK_STEPS + 10)])
    whole = series.step_axes(run, range(1, 3 * BLOCK_STEPS + 10))
    assert whole["tokens"] == expected.tolist()
    window = series.step_axes(run, [600, 700, 3 * BLOCK_STEPS + 5])
    assert window["tokens"] == [expected[599], expected[699], expected[3 * BLOCK_STEPS + 4]]
    assert window["t"] == [whole["t"][599], whole["t"][699], whole["t"][3 * BLOCK_STEPS + 4]]


def test_a_block_round_trips_through_its_bytes(owner):
    run = make_run(owner)
    ingest(run, events(range(1, 60)))
    table = read_table(run.pk)
    back = decode_block(table.keys, table.steps.size, encode_block(table), table.last_seq)
    assert back.steps.tolist() == table.steps.tolist()
    assert np.array_equal(back.values, table.values, equal_nan=True)
    assert (back.present == table.present).all()
    assert back.created.tolist() == table.created.tolist()


def test_the_overview_of_a_long_run_keeps_a_one_step_spike(owner):
    run = make_run(owner)
    spike = 4321

    def with_spike():
        for event in events(range(1, 7501)):
            if event["step"] == spike:
                event["metrics"]["reward/mean"] = 50.0
            yield event

    steps = list(with_spike())
    for i in range(0, len(steps), 500):
        ingest(run, steps[i:i + 500])
    found, _ = series.metric_series(run)
    payload = series.series_payload(found["reward/mean"], 2000)
    assert payload["downsampled"] and len(payload["x"]) <= 2000
    assert payload["y"][payload["x"].index(spike)] == 50.0
    assert series_store.block_of(7500) == 7500 // BLOCK_STEPS
