"""Uploaded datasets and their rows (docs/explanation/architecture.md "Data model").

A dataset holds one *version* of its rows at a time. An upload is validated and imported by a
Celery task; the new rows replace the old ones in one transaction, so a failed re-upload leaves the
previous version in place. `status`, `progress` and `errors` describe the latest upload attempt;
`row_count`, `train_count`, `dev_count` and `version` describe the rows stored now.
"""

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    """A file of one schema kind (`webapp.datasets.schemas`), split into train and dev.

    Status of the latest upload::

        pending ──> queued ──> importing ──> ready
                                   └──────> failed   (the previous version, if any, is kept)
    """

    class Kind(models.TextChoices):
        """The kinds of `schemas.SCHEMAS`; plugin programs add generic ``fields:...`` kinds."""

        CLASSIFICATION = "classification"
        QA = "qa"
        CLAIM = "claim"
        TOOLCALL = "toolcall"
        MATH = "math"
        PRIVACY = "privacy"
        CORPUS = "corpus", "retrieval corpus"

    class Status(models.TextChoices):
        PENDING = "pending"
        QUEUED = "queued"
        IMPORTING = "importing"
        READY = "ready"
        FAILED = "failed"

    ACTIVE_STATUSES = frozenset({Status.QUEUED, Status.IMPORTING})

    name = models.SlugField(max_length=100, unique=True)
    # One of Kind, or a generic "fields:a,b" kind of a plugin program (schemas.py), hence no choices.
    kind = models.CharField(max_length=200, help_text="Schema kind (webapp.datasets.schemas).")
    description = models.TextField(blank=True)
    source_filename = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    row_count = models.PositiveIntegerField(default=0)
    train_count = models.PositiveIntegerField(default=0)
    dev_count = models.PositiveIntegerField(default=0)
    version = models.PositiveIntegerField(default=0, help_text="Number of successful imports; 0: no rows yet.")
    imported_at = models.DateTimeField(null=True, blank=True, help_text="When the stored rows were imported.")
    progress = models.PositiveSmallIntegerField(default=0, help_text="Percent done of the latest upload.")
    progress_note = models.CharField(max_length=300, blank=True)
    import_options = models.JSONField(default=dict, blank=True, help_text="Options of the latest upload.")
    errors = models.JSONField(default=list, blank=True, help_text="Validation errors of the last upload.")
    error_count = models.PositiveIntegerField(default=0, help_text="All errors of the last upload (`errors` keeps the first 50).")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name

    @property
    def is_importing(self) -> bool:
        return self.status in self.ACTIVE_STATUSES


class DatasetRow(models.Model):
    """One record of a dataset, with the file (`part`: 0 the main file, 1 a separate dev file) and
    the line it came from (1-based; a Parquet row's index + 1), so errors can point back to it."""

    class Split(models.TextChoices):
        TRAIN = "train"
        DEV = "dev"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="rows")
    split = models.CharField(max_length=5, choices=Split.choices)
    part = models.PositiveSmallIntegerField(default=0, help_text="Which uploaded file: 0 main, 1 dev file.")
    line_number = models.PositiveIntegerField()
    ext_id = models.CharField(max_length=200, help_text="The record's own id.")
    data = models.JSONField()

    class Meta:
        ordering = ["dataset", "part", "line_number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "part", "line_number"], name="datasetrow_unique_line"),
            models.UniqueConstraint(fields=["dataset", "ext_id"], name="datasetrow_unique_id"),
        ]
        indexes = [models.Index(fields=["dataset", "split", "line_number"], name="datasetrow_split_line")]

    def __str__(self):
        return f"{self.dataset.name}:{self.line_number}"
