"""The launch form follows the user's choices, in a real browser (static/js/launch-form.js,
static/js/reward-editor.js): a field is in view only while the chosen strategy, estimator, backend or
program reads it, hidden fields keep their values and are still posted and validated, the reward editor
writes the rewards JSON that is launched, and the model picker fills the model box."""

import json

import pytest
from playwright.sync_api import expect

from tests.browser.session import log_in
from tests.conftest import asgi_server_process, service_env
from tests.suites import UI_ONLY
from trainer.config import PROGRAM_OPTIMIZES_PROMPTS, RunConfig
from trainer.models.cache import MARKER_NAME
from webapp.runs.launch.catalog import catalog_sync
from webapp.runs.models import Run, Task

pytestmark = [pytest.mark.browser, pytest.mark.backend_neutral(reason=UI_ONLY), pytest.mark.django_db(transaction=True)]


def open_form(page, base_url: str, query: str = "") -> None:
    """The toy task's launch form once its script has applied the conditions, every group unfolded, so
    that "visible" means the script shows the field (a folded group hides its fields from Playwright)."""
    task = Task.objects.get(name="toy")
    page.goto(f"{base_url}/runs/new?task={task.pk}{query}")
    page.wait_for_selector("form.launch[data-conditions-ready]", state="attached")
    page.eval_on_selector_all("details.group", "groups => groups.forEach(g => { g.open = true; })")


def set_control(page, key: str, value: str) -> None:
    """Makes the form's `key` take `value` as a condition compares it (see RunConfig.field_conditions)."""
    if key == PROGRAM_OPTIMIZES_PROMPTS:  # the first enabled program whose option says so
        program = page.eval_on_selector(
            "#id_program", "(s, v) => [...s.options].find(o => !o.disabled && o.dataset.optimizesPrompts === v)?.value",
            value)
        assert program, f"no enabled program with {key} = {value} (the DSPy test plugin should be installed)"
        page.select_option("#id_program", program)
    elif page.get_attribute(f"#id_{key}", "type") == "checkbox":
        page.set_checked(f"#id_{key}", value == "true")
    else:
        page.select_option(f"#id_{key}", value)


def other_value(page, key: str, values: list[str]) -> str:
    """A value of `key` outside `values`: one under which the field that needs `values` is not read."""
    if key == PROGRAM_OPTIMIZES_PROMPTS or page.get_attribute(f"#id_{key}", "type") == "checkbox":
        return next(v for v in ("true", "false") if v not in values)
    options = page.eval_on_selector_all(f"#id_{key} option", "os => os.map(o => o.value)")
    return next(v for v in options if v not in values)


def test_each_field_shows_only_under_the_choices_that_read_it(page, screenshot, asgi_server, make_user, test_plugins):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    open_form(page, asgi_server)
    # The defaults (grpo, hf, estimator grpo, the toy program): none of the other strategies' knobs.
    for name in ("teacher_rollouts", "sampling", "fork_probabilities", "gdpo_batch_norm", "vllm_enable_sleep_mode",
                 "program_state", "prompt_optimizer"):
        expect(page.locator(f"#field-{name}")).to_be_hidden()
    for name in ("padding", "hf_generate_rows", "strategy", "estimator", "backend", "rewards"):
        expect(page.locator(f"#field-{name}")).to_be_visible()
    # The toy program is no DSPy program: the whole "Optimize prompts first" group goes, not just its fields.
    expect(page.locator("details.group", has=page.locator("#field-prompt_optimizer"))).to_be_hidden()
    screenshot("launch-form-grpo")

    conditions = RunConfig.field_conditions()
    for name, condition in conditions.items():
        open_form(page, asgi_server)
        wrapper = page.locator(f"#field-{name}")
        first, values = next(iter(condition.items()))
        set_control(page, first, other_value(page, first, values))
        expect(wrapper, f"{name} with {first} != {values}").to_be_hidden()
        for key, values in condition.items():  # controllers first: conditions are closed and ordered
            set_control(page, key, values[0])
        expect(wrapper, f"{name} with {condition}").to_be_visible()
        expect(page.locator("details.group", has=wrapper)).to_be_visible()

    open_form(page, asgi_server)
    set_control(page, "strategy", "mhgpo")
    set_control(page, "sampling", "rr")
    set_control(page, "backend", "vllm")
    expect(page.locator("#field-fork_probabilities")).to_be_visible()
    expect(page.locator("#field-padding")).to_be_hidden()
    expect(page.locator("#field-hf_generate_rows")).to_be_hidden()
    expect(page.locator("#field-importance_sampling_cap")).to_be_visible()
    expect(page.locator("#field-vllm_enable_sleep_mode")).to_be_visible()
    screenshot("launch-form-mhgpo-rr-vllm")
    set_control(page, "importance_sampling_correction", "false")
    expect(page.locator("#field-importance_sampling_cap")).to_be_hidden()

    open_form(page, asgi_server)  # a DSPy program brings back "Optimize prompts first" and program_state
    set_control(page, PROGRAM_OPTIMIZES_PROMPTS, "true")
    expect(page.locator("#field-program_state")).to_be_visible()
    expect(page.locator("#field-prompt_optimizer_trials")).to_be_hidden()
    set_control(page, "prompt_optimizer", "bootstrap_rs")  # demos only: no proposer model to offer
    expect(page.locator("#field-prompt_optimizer_demos")).to_be_visible()
    expect(page.locator("#field-prompt_optimizer_model")).to_be_hidden()
    set_control(page, "prompt_optimizer", "gepa")  # instructions only: no demo budgets
    expect(page.locator("#field-prompt_optimizer_trials")).to_be_visible()
    expect(page.locator("#field-prompt_optimizer_model")).to_be_visible()
    expect(page.locator("#field-prompt_optimizer_labeled_demos")).to_be_hidden()
    page.locator("#field-prompt_optimizer").scroll_into_view_if_needed()
    screenshot("launch-form-dspy-prompts")


def test_a_presets_values_survive_hidden_fields_and_are_posted(page, screenshot, asgi_server, make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    open_form(page, asgi_server, "&preset=mhgpo-rr")
    fork = page.locator("#field-fork_probabilities")
    expect(fork).to_be_visible()
    assert page.input_value("#id_fork_probabilities") == "0.7, 0.1, 0.2" and page.input_value("#id_sampling") == "rr"

    page.select_option("#id_strategy", "grpo")
    expect(fork).to_be_hidden()
    expect(page.locator("#field-sampling")).to_be_hidden()
    assert page.input_value("#id_fork_probabilities") == "0.7, 0.1, 0.2" and page.input_value("#id_sampling") == "rr"
    page.select_option("#id_strategy", "mhgpo")
    expect(fork).to_be_visible()
    assert page.input_value("#id_fork_probabilities") == "0.7, 0.1, 0.2" and page.input_value("#id_sampling") == "rr"

    # Hidden is not dropped: the preset's probabilities are posted with strategy grpo and refused beside
    # their field, which comes back into view because it holds the error.
    page.select_option("#id_strategy", "grpo")
    expect(fork).to_be_hidden()
    page.click("button[type=submit].primary")
    page.wait_for_selector("#error-fork_probabilities")
    expect(page.locator("#error-fork_probabilities")).to_contain_text("fork_probabilities is an MHGPO round-robin option")
    expect(fork).to_be_visible()
    assert page.input_value("#id_fork_probabilities") == "0.7, 0.1, 0.2" and page.input_value("#id_strategy") == "grpo"
    assert not Run.objects.exists()
    screenshot("launch-form-hidden-field-refused")

    # And a valid hidden value is launched as set: the vLLM memory share, set before choosing hf.
    open_form(page, asgi_server)
    page.select_option("#id_backend", "vllm")
    page.fill("#id_vllm_gpu_memory_utilization", "0.7")
    page.select_option("#id_backend", "hf")
    expect(page.locator("#field-vllm_gpu_memory_utilization")).to_be_hidden()
    page.click("button[type=submit].primary")
    page.wait_for_url("**/runs/*/")
    config = Run.objects.latest("pk").config
    assert config["backend"] == "hf" and config["vllm_gpu_memory_utilization"] == 0.7


def reward_rows(page) -> list[str]:
    return page.eval_on_selector_all(".reward-row", "rows => rows.map(r => r.dataset.reward)")


def test_the_reward_editor_writes_the_rewards_that_are_launched(page, screenshot, asgi_server, make_user):
    catalog_sync()
    make_user("alice", password="a-long-test-password")
    log_in(page, asgi_server, "alice")
    open_form(page, asgi_server)
    page.wait_for_selector("#reward-editor[data-ready]")
    task_rewards = [r["name"] for r in Task.objects.get(name="toy").rewards]
    assert reward_rows(page) == task_rewards
    expect(page.locator("#id_rewards")).to_be_hidden()  # the rows are the editor; the JSON is one click away

    # Power users: the JSON view; a broken edit leaves the rows alone, a good one rebuilds them.
    page.click("#reward-json-toggle")
    expect(page.locator("#id_rewards")).to_be_visible()
    original = page.input_value("#id_rewards")
    page.fill("#id_rewards", '[{"name": "exact_match"},')
    expect(page.locator("#reward-json-error")).to_contain_text("Not valid JSON")
    assert reward_rows(page) == task_rewards
    screenshot("launch-form-rewards-json-invalid")
    page.fill("#id_rewards", '[{"name": "exact_match", "weight": 2}]')
    expect(page.locator("#reward-json-error")).to_be_hidden()
    expect(page.locator(".reward-row")).to_have_count(1)
    assert page.input_value(".reward-row .reward-weight") == "2"
    screenshot("launch-form-rewards-json")
    page.fill("#id_rewards", original)
    expect(page.locator(".reward-row")).to_have_count(len(task_rewards))
    page.click("#reward-json-toggle")
    expect(page.locator("#id_rewards")).to_be_hidden()

    # A third reward: GDPO's length reward with its own limit, counted only where exact_match reaches 0.5.
    given = json.loads(original)
    page.click("#reward-add")
    expect(page.locator(".reward-row")).to_have_count(len(task_rewards) + 1)
    row = page.locator(".reward-row").last
    row.locator("select.reward-name").select_option("length")
    row = page.locator(".reward-row[data-reward=length]")
    row.locator("input[data-param=limit]").fill("64")
    row.locator("input[data-param=module]").fill("echo")  # an optional parameter: empty would be null
    row.locator("select.reward-condition").select_option("exact_match")
    row.locator("input.reward-threshold").fill("0.5")
    page.locator(".reward-row[data-reward=exact_match] .reward-weight").fill("0.5")
    length = {"name": "length", "weight": 1, "params": {"limit": 64, "module": "echo"},
              "condition_on": "exact_match", "threshold": 0.5}
    # The task's rewards come back exactly as given (keys and all), but for the one weight changed.
    assert json.loads(page.input_value("#id_rewards")) == [
        {**r, "weight": 0.5} if r["name"] == "exact_match" else r for r in given] + [length]
    screenshot("launch-form-rewards")

    page.click("button[type=submit].primary")
    page.wait_for_url("**/runs/*/")
    launched = {r["name"]: r for r in Run.objects.latest("pk").config["rewards"]}
    assert launched["length"] == length
    assert launched["exact_match"]["weight"] == 0.5


def test_the_model_picker_offers_built_allowed_and_downloaded_models(page, screenshot, make_user, tmp_path,
                                                                     transactional_db):
    from webapp.limits.models import AllowedModel

    catalog_sync()
    cache = tmp_path / "model-cache"
    (cache / "tiny-toy").mkdir(parents=True)
    (cache / "tiny-toy" / MARKER_NAME).write_text("{}")
    (cache / "hub" / "models--HuggingFaceTB--SmolLM2-360M-Instruct" / "snapshots" / "abc").mkdir(parents=True)
    AllowedModel.objects.create(kind=AllowedModel.Kind.PREFIX, value="Qwen/")
    AllowedModel.objects.create(kind=AllowedModel.Kind.ID, value="meta-llama/Llama-3.2-1B-Instruct")
    make_user("alice", password="a-long-test-password")
    env = service_env(COHORT_MODEL_CACHE=str(cache), COHORT_MODEL_ALLOWED_PREFIXES="")
    with asgi_server_process(tmp_path / "daphne.log", env) as base_url:
        log_in(page, base_url, "alice")
        open_form(page, base_url)
        picker = page.locator("#model-picker")
        expect(picker).to_be_visible()
        tiny = picker.locator(".model-group[data-group=builtin] button[data-model='builtin:tiny']")
        expect(tiny.locator(".badge")).to_have_text("cached")
        expect(picker.locator("button[data-model='builtin:smollm2-135m-instruct'] .badge")).to_have_count(0)
        prefix = picker.locator(".model-group[data-group=allowed] button[data-kind=prefix]")
        expect(prefix).to_have_text("Qwen/…")
        downloaded = picker.locator(".model-group[data-group=downloaded] button")
        expect(downloaded).to_have_text("HuggingFaceTB/SmolLM2-360M-Instruct not allowed")  # not on the list
        assert page.get_attribute("#id_model", "list") == "model-choices"  # the datalist is still there

        prefix.click()
        assert page.input_value("#id_model") == "Qwen/"
        expect(page.locator("#id_model")).to_be_focused()
        page.keyboard.type("Qwen2.5-0.5B-Instruct")  # the caret waited at the end of the prefix
        assert page.input_value("#id_model") == "Qwen/Qwen2.5-0.5B-Instruct"
        expect(prefix).to_have_class("chip model-choice active")
        picker.locator("button[data-model='meta-llama/Llama-3.2-1B-Instruct']").click()
        assert page.input_value("#id_model") == "meta-llama/Llama-3.2-1B-Instruct"
        screenshot("launch-form-model-picker")
        tiny.click()
        assert page.input_value("#id_model") == "builtin:tiny"
        page.fill("#id_model", "my-lab/any-model")  # free text stays possible: the allow-list decides at launch
        assert page.input_value("#id_model") == "my-lab/any-model"
