"""`cohort.dspy.MMGRPO(client=...)` against a real server (issue 26, item 1): the real ASGI app
(daphne) and a real Celery worker train the test plugin's DSPy program on the real SmolLM2, from the
prompts the client optimized; `compile` returns the program on the adapter it downloaded. The run is
the token owner's, a stranger cannot see it or its adapter, and an over-limit run is refused."""

from __future__ import annotations

import json

import dspy
import pytest

from cohort.client import Client, CohortAPIError
from cohort.dspy import MMGRPO, CohortLM
from tests.conftest import asgi_server_process, service_env
from tests.webapp.runs.factories import make_multihop_task
from trainer.dspy.adapters import MarkerFallbackAdapter
from webapp.api.services import token_create
from webapp.limits.models import LimitOverride
from webapp.runs.ingest.texts import fill_call_texts
from webapp.runs.models import ModuleCall, Run
from webapp.runs.services import run_directory

NEUTRAL = ("cohort.dspy's MMGRPO compiling through a real server and worker and downloading the adapter, and "
           "an over-limit run refused; run creation and the adapter download through the API, the launch "
           "limits, and a real worker's claim and ingest are tested on both backends in "
           "tests/webapp/api/test_launch.py, tests/webapp/limits/test_limits.py and "
           "tests/workers/test_run_train.py")
pytestmark = [pytest.mark.slow, pytest.mark.backend_neutral(reason=NEUTRAL), pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("test_plugins")]

MODEL = "builtin:smollm2-135m-instruct"
INSTRUCTION = "Write one short search query for the question."
TINY = {"steps": 1, "group_size": 2, "rollouts_per_example": 2, "examples_per_step": 2, "max_new_tokens": 8,
        "max_context_length": 1024}


@pytest.fixture
def multihop_task(tmp_path):
    return make_multihop_task(tmp_path)


@pytest.fixture
def server(celery_worker_process, runs_dir, tmp_path, smollm2_in_model_cache):
    """The real ASGI app sharing the worker's runs folder (where adapters are read from)."""
    with asgi_server_process(tmp_path / "daphne.log", service_env(COHORT_RUNS_DIR=str(runs_dir))) as url:
        yield url


def student():
    from cohort_dspy_plugin.program import MultiHop

    program = MultiHop()
    program.query.signature = program.query.signature.with_instructions(INSTRUCTION)  # what PO left behind
    program.set_lm(CohortLM(MODEL, max_tokens=8))
    return program


def trainset():
    return [dspy.Example(question="Capital of France?", hops=1, answer="Paris").with_inputs("question", "hops")]


def test_compile_with_a_client_trains_on_the_server_and_returns_the_downloaded_adapter(
        server, multihop_task, owner, stranger, runs_dir, tmp_path):
    key = token_create(user=owner, name="notebook")[1]
    optimizer = MMGRPO(client=Client(server, key), task="multihop", model=MODEL, run_dir=tmp_path / "client",
                       timeout=900, **TINY)
    trained = optimizer.compile(student(), trainset=trainset())

    run = Run.objects.get(pk=optimizer.last_run["id"])
    assert run.owner == owner and run.state == Run.State.SUCCEEDED and run.tags == ["cohort.dspy"]
    assert run.task == multihop_task and run.config["model"] == MODEL and run.config["steps"] == 1
    saved = json.loads(open(run.config["program_state"], encoding="utf-8").read())
    assert saved["query"]["signature"]["instructions"] == INSTRUCTION
    calls = list(ModuleCall.objects.filter(rollout__run=run, module="query"))
    fill_call_texts(calls)  # the texts are stored compressed beside the calls
    prompts = [json.dumps(c.messages) for c in calls]
    assert prompts and all(INSTRUCTION in p for p in prompts)  # the server trained the optimized prompts

    lm = trained.query.lm
    assert isinstance(lm, CohortLM) and lm.adapter == str((tmp_path / "client" / "adapter").resolve())
    server_adapter = run_directory(run.pk) / "adapter"
    for name in ("adapter_config.json", "adapter_model.safetensors", "README.md"):
        assert (tmp_path / "client" / "adapter" / name).read_bytes() == (server_adapter / name).read_bytes()
    # loadable off the server: it names the model id, not the worker's model folder
    assert json.loads((server_adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == MODEL
    with dspy.context(adapter=MarkerFallbackAdapter()):  # as the server's program reads small models
        assert isinstance(trained(question="Capital of Italy?", hops=1).answer, str)

    other = Client(server, token_create(user=stranger, name="theirs")[1])
    for call in (lambda: other.run(run.pk), lambda: other.download_adapter(run.pk, tmp_path / "stolen")):
        with pytest.raises(CohortAPIError) as refused:
            call()
        assert refused.value.status == 404
    assert not (tmp_path / "stolen").exists()


def test_a_run_over_the_owners_limit_is_refused_by_the_server(asgi_server, multihop_task, owner, tmp_path):
    # Refused at creation, before any worker: the session's server will do.
    LimitOverride.objects.create(user=owner, tokens_per_run=10)
    optimizer = MMGRPO(client=Client(asgi_server, token_create(user=owner, name="nb")[1]), task="multihop",
                       model=MODEL, run_dir=tmp_path / "client", **TINY)
    with pytest.raises(CohortAPIError) as refused:
        optimizer.compile(student(), trainset=trainset())
    assert refused.value.status == 400 and "your limit is 10" in refused.value.errors["steps"][0]
    assert not Run.objects.exists()
