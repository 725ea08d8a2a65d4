"""CohortLM: the DSPy LM on Cohort's own sampling backend (loaded lazily, shared, adapter-aware)."""

import dspy
import pytest

from trainer.dspy.local_lm import CohortLM


def test_the_model_name_says_which_adapter_it_samples_with(tmp_path):
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    base = CohortLM("builtin:smollm2-135m-instruct")
    trained = base.with_adapter(adapter)
    assert base.model == "cohort/builtin:smollm2-135m-instruct" and base.adapter is None
    assert trained.model == f"cohort/builtin:smollm2-135m-instruct@{adapter.resolve()}"
    assert trained.with_adapter(None).model == base.model
    assert isinstance(trained, dspy.LM) and trained.cache is False  # sampled answers are not replayed


def test_a_folder_that_is_not_an_adapter_is_refused_at_once(tmp_path):
    with pytest.raises(FileNotFoundError, match="adapter_config.json"):
        CohortLM("builtin:smollm2-135m-instruct", adapter=tmp_path)


def test_it_answers_a_dspy_predictor_from_the_real_model(smollm2_dir):
    lm = CohortLM("builtin:smollm2-135m-instruct", max_tokens=12, temperature=0.0)
    predict = dspy.Predict("question -> answer")
    predict.lm = lm
    from trainer.dspy.adapters import MarkerFallbackAdapter

    with dspy.context(adapter=MarkerFallbackAdapter()):
        first = predict(question="What is the capital of France?")
        again = predict(question="What is the capital of France?")
    assert first.answer and first.answer == again.answer  # greedy: the same answer twice
    assert len(lm.history) == 2 and lm.history[0]["usage"]["completion_tokens"] <= 12
