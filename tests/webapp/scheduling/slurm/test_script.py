"""The batch script of a run's Slurm job (webapp/scheduling/slurm/script.py): the job's shape from the
run's processes and the partition's GPUs, every #SBATCH line the script asks for, the site's setup and
the trainer's environment before the exec; and what it renders is a script a real sbatch takes."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path

import pytest

from webapp.scheduling.slurm.script import JobShape, batch_script, job_shape, sbatch_option_lines


def render(run_dir: Path, **changes) -> str:
    arguments = dict(run_id=7, attempt=2, partition="gpu", time_limit_min=20, shape=JobShape(2, 1, 2),
                     run_dir=run_dir, account="", extra_sbatch="", setup="", python="/opt/venv/bin/python",
                     server_url="http://cohort.lab:8000", signal_s=300, cpus_per_task=1, mem_per_task_mb=0,
                     environment={})
    return batch_script(**{**arguments, **changes})


def sbatch_lines(script: str) -> list[str]:
    return [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH ")]


@pytest.mark.parametrize(("processes", "gpus_per_node", "shape"), [
    (1, 0, JobShape(tasks=1, nodes=1, gpus_per_node=0)),
    (5, 0, JobShape(tasks=5, nodes=1, gpus_per_node=0)),  # a CPU partition: every task on one node, no gres
    (1, 2, JobShape(tasks=1, nodes=1, gpus_per_node=1)),
    (2, 2, JobShape(tasks=2, nodes=1, gpus_per_node=2)),
    (3, 2, JobShape(tasks=3, nodes=2, gpus_per_node=2)),  # as few nodes as hold them, GPUs per node for the most
    (4, 2, JobShape(tasks=4, nodes=2, gpus_per_node=2)),
    (8, 8, JobShape(tasks=8, nodes=1, gpus_per_node=8)),
    (0, 2, JobShape(tasks=1, nodes=1, gpus_per_node=1)),  # at least one task
])
def test_a_job_has_one_task_per_process_and_one_gpu_each_on_as_few_nodes_as_hold_them(processes, gpus_per_node,
                                                                                        shape):
    assert job_shape(processes, gpus_per_node) == shape


def test_the_script_asks_for_the_runs_job_with_requeue_the_warning_signal_and_no_exported_environment(tmp_path):
    script = render(tmp_path / "run-7", shape=job_shape(3, 2))
    assert script.startswith("#!/bin/bash\n# Cohort run 7: ")
    assert "its events go to http://cohort.lab:8000" in script
    assert sbatch_lines(script) == [
        "--job-name=cohort-run-7", "--partition=gpu", "--time=20", "--ntasks=3", "--nodes=2", "--gres=gpu:2",
        "--cpus-per-task=1", f"--output={tmp_path / 'run-7' / 'slurm-%j.out'}", "--requeue", "--signal=B:USR1@300",
        "--export=NONE"]


def test_gres_only_on_a_gpu_partition_and_account_and_memory_only_when_set(tmp_path):
    cpu = sbatch_lines(render(tmp_path, partition="cpu", shape=job_shape(4, 0)))
    assert not any(line.startswith("--gres") for line in cpu)
    assert not any(line.startswith(("--account", "--mem-per-cpu")) for line in cpu)
    assert "--ntasks=4" in cpu and "--nodes=1" in cpu
    charged = sbatch_lines(render(tmp_path, account="lab", cpus_per_task=4, mem_per_task_mb=8000))
    assert "--account=lab" in charged and "--cpus-per-task=4" in charged
    assert "--mem-per-cpu=2000" in charged  # the task's memory shared out over its CPUs
    assert "--gres=gpu:2" in charged
    floors = sbatch_lines(render(tmp_path, signal_s=0, cpus_per_task=0))
    assert "--signal=B:USR1@1" in floors and "--cpus-per-task=1" in floors


def test_the_admins_extra_options_become_sbatch_lines_after_cohorts_own(tmp_path):
    assert sbatch_option_lines("--qos=high\n\n  #SBATCH --mail-type=END  \n") == [
        "#SBATCH --qos=high", "#SBATCH --mail-type=END"]
    lines = render(tmp_path, extra_sbatch="--qos=high\n--constraint=a100").splitlines()
    assert lines.index("#SBATCH --qos=high") > lines.index("#SBATCH --export=NONE")
    assert lines.index("#SBATCH --constraint=a100") == lines.index("#SBATCH --qos=high") + 1


def test_the_setup_and_the_environment_come_before_the_exec_of_the_job_with_its_attempt(tmp_path):
    run_dir = tmp_path / "runs dir" / "run-7"
    script = render(run_dir, setup="module load cuda/12\nsource /opt/env.sh\n",
                    environment={"HF_HOME": "/models/hf cache/$USER", "COHORT_MODEL_CACHE": "/models"},
                    python="/opt/my venv/bin/python")
    lines = script.splitlines()
    exec_line = next(line for line in lines if line.startswith("exec "))
    assert lines.index("module load cuda/12") < lines.index("source /opt/env.sh") < lines.index(exec_line)
    assert lines.index("module load cuda/12") > max(i for i, line in enumerate(lines) if line.startswith("#SBATCH"))
    exports = [line for line in lines if line.startswith("export ")]
    assert exports == ["export COHORT_MODEL_CACHE=/models", "export HF_HOME='/models/hf cache/$USER'",
                       "export COHORT_SUSPEND_ON_SIGNALS=TERM"]  # sorted, shell-quoted: no expansion
    assert all(lines.index(line) < lines.index(exec_line) for line in exports)
    assert shlex.split(exec_line) == [
        "exec", "/opt/my venv/bin/python", "-m", "cohort.slurm_job", "--server", "http://cohort.lab:8000",
        "--run", "7", "--attempt", "2", "--run-dir", str(run_dir), "--token-file", str(run_dir / "job-token")]
    assert script.endswith(exec_line + "\n")
    assert "COHORT_SLURM_SETUP" in script
    assert "COHORT_SLURM_SETUP" not in render(run_dir)  # no setup, no section


def test_a_script_without_a_server_url_says_so_and_is_valid_shell(tmp_path):
    script = render(tmp_path, server_url="", environment={"A": "it's \"quoted\"; $(rm -rf /)"})
    assert "(COHORT_SLURM_SERVER_URL is not set)" in script
    path = tmp_path / "job.sbatch"
    path.write_text(script)
    assert subprocess.run(["bash", "-n", str(path)], capture_output=True).returncode == 0
    assert "export A='it'\"'\"'s \"quoted\"; $(rm -rf /)'" in script


def test_a_real_sbatch_takes_the_rendered_script_and_refuses_more_gpus_than_a_node_has(cluster, tmp_path):
    """`sbatch --test-only`: Slurm validates the script's #SBATCH lines without queueing a job."""
    def test_only(script: str) -> subprocess.CompletedProcess:
        path = tmp_path / "job.sbatch"
        path.write_text(script)
        return cluster.run("sbatch", "--test-only", f"--chdir={tmp_path}", str(path))

    fits = test_only(render(tmp_path, shape=job_shape(2, 2), extra_sbatch="--comment=cohort",
                            setup="echo set up"))
    assert fits.returncode == 0, fits.stderr
    assert "to start at" in fits.stderr
    two_nodes = test_only(render(tmp_path, shape=job_shape(3, 2)))  # two nodes, the cluster has one
    assert two_nodes.returncode != 0
    too_long = test_only(render(tmp_path, time_limit_min=45))  # gpu's MaxTime is 30
    assert too_long.returncode != 0 and "time limit" in too_long.stderr
