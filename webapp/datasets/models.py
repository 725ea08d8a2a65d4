"""Uploaded datasets and their rows (DESIGN.md "Data model")."""

from django.conf import settings
from django.db import models


class Dataset(models.Model):
    """A file of one schema kind, split into train and dev."""

    class Kind(models.TextChoices):
        CLASSIFICATION = "classification"
        QA = "qa"
        CLAIM = "claim"
        TOOLCALL = "toolcall"
        MATH = "math"
        PRIVACY = "privacy"
        CORPUS = "corpus", "retrieval corpus"

    class Status(models.TextChoices):
        PENDING = "pending"
        IMPORTING = "importing"
        READY = "ready"
        FAILED = "failed"

    name = models.SlugField(max_length=100, unique=True)
    kind = models.CharField(max_length=20, choices=Kind.choices)
    description = models.TextField(blank=True)
    source_filename = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.PENDING)
    row_count = models.PositiveIntegerField(default=0)
    train_count = models.PositiveIntegerField(default=0)
    dev_count = models.PositiveIntegerField(default=0)
    errors = models.JSONField(default=list, blank=True, help_text="Validation errors of the last upload.")
    uploaded_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self):
        return self.name


class DatasetRow(models.Model):
    """One record of a dataset, with the line it came from (1-based) for error messages."""

    class Split(models.TextChoices):
        TRAIN = "train"
        DEV = "dev"

    dataset = models.ForeignKey(Dataset, on_delete=models.CASCADE, related_name="rows")
    split = models.CharField(max_length=5, choices=Split.choices)
    line_number = models.PositiveIntegerField()
    ext_id = models.CharField(max_length=200, help_text="The record's own id.")
    data = models.JSONField()

    class Meta:
        ordering = ["dataset", "line_number"]
        constraints = [
            models.UniqueConstraint(fields=["dataset", "line_number"], name="datasetrow_unique_line"),
            models.UniqueConstraint(fields=["dataset", "ext_id"], name="datasetrow_unique_id"),
        ]
        indexes = [models.Index(fields=["dataset", "split", "line_number"], name="datasetrow_split_line")]

    def __str__(self):
        return f"{self.dataset.name}:{self.line_number}"
