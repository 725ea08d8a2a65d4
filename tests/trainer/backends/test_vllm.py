"""The vLLM backend is optional: without the extra, choosing it fails with an install hint."""

from __future__ import annotations

import sys

import pytest


def test_choosing_vllm_without_the_extra_says_how_to_install_it(monkeypatch, tmp_path):
    from trainer.backends import BackendUnavailableError, get_backend

    # None in sys.modules makes `import vllm` raise ImportError even where vLLM is installed.
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(BackendUnavailableError, match=r"\[vllm\] extra") as info:
        get_backend("vllm", model_path=tmp_path)
    assert isinstance(info.value, ImportError)
    assert "'hf'" in str(info.value)


def test_the_backend_module_imports_without_vllm(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)
    import trainer.backends.vllm as module

    assert module.VLLMBackend.name == "vllm"


def test_unknown_backend_name_is_a_value_error():
    from trainer.backends import get_backend

    with pytest.raises(ValueError, match="unknown sampling backend 'sglang'.*'hf'.*'vllm'"):
        get_backend("sglang")


def test_the_engine_gets_the_smallest_lora_rank_vllm_accepts():
    import doctest

    import trainer.backends.vllm as module

    assert doctest.testmod(module).failed == 0
    with pytest.raises(ValueError, match="above vLLM's largest LoRA rank"):
        module.engine_lora_rank(513)
