# One image for web and workers. On a GPU host `pip install torch==2.13.0` takes the CUDA build
# from PyPI; pass --build-arg EXTRAS=train,dspy,vllm for the vLLM sampling backend. vLLM compiles
# Triton kernels when its engine starts, which needs a C compiler: python:3.11-slim has none.
# Your own programs and rewards (plugins, README "Train your own program") go in with
# --build-arg PLUGINS="your-package==1.0" (anything pip installs: a name, a git URL, ./examples/...).
# The manual (docs/, mkdocs.yml) is built into the image, which serves it at /docs/ with no internet.
FROM python:3.11-slim

ENV PYTHONUNBUFFERED=1 PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1
ARG EXTRAS=train,dspy
ARG PLUGINS=""
WORKDIR /app

RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
    && rm -rf /var/lib/apt/lists/*
RUN pip install torch==2.13.0
COPY pyproject.toml README.md ./
COPY webapp ./webapp
COPY trainer ./trainer
COPY workers ./workers
COPY cohort ./cohort
# The docs extra (MkDocs, Material, mkdocstrings) whatever EXTRAS names: the manual is built below.
# The import extra (wandb, tbparse, TensorBoard) too: the runs page's upload form reads those files.
RUN pip install ".[${EXTRAS},docs,import]"
COPY examples ./examples
RUN if [ -n "$PLUGINS" ]; then pip install $PLUGINS; fi
COPY manage.py ./
COPY templates ./templates
COPY static ./static
# Static files are collected at build time; the settings need production values to load.
RUN DJANGO_ENV=production SECRET_KEY=build-only-not-a-secret-build-only-not-a-secret-xx \
    ALLOWED_HOSTS=build python manage.py collectstatic --noinput
# The manual, as `make docs` builds it (--strict: a broken link fails the image's build), into
# /app/build/docs-site, where the settings' COHORT_DOCS_DIR looks by default. Its generated reference
# pages read the Makefile (the command line) and the files that read a setting
# (docs_hooks/environment_page.py; the test suite's own settings are named there without their files).
COPY mkdocs.yml Makefile Dockerfile docker-compose.yml ./
COPY docs_hooks ./docs_hooks
COPY docs ./docs
RUN NO_MKDOCS_2_WARNING=1 python -m mkdocs build --strict

# The run folders and the model cache (HF_HOME of every run: hub downloads, the built-in models)
# belong to the image's user; a fresh named volume mounted there takes this ownership.
RUN useradd --create-home cohort && mkdir -p /data/runs /data/hf && chown cohort:cohort /data/runs /data/hf
ENV COHORT_RUNS_DIR=/data/runs COHORT_MODEL_CACHE=/data/hf HF_HOME=/data/hf
VOLUME ["/data/runs", "/data/hf"]
USER cohort
EXPOSE 8000
