"""The admin's upload form and the upload handler that enforces the size limit while streaming."""

from __future__ import annotations

from django import forms
from django.core.files.uploadhandler import FileUploadHandler, StopUpload

from webapp.datasets.kinds import upload_schemas
from webapp.datasets.models import Dataset
from webapp.datasets.readers import FileProblem, file_format
from webapp.datasets.schemas import find_schema
from webapp.datasets.services import ImportOptions, max_upload_bytes, parse_mapping


def _mb(size: int) -> str:
    return f"{size / (1024 * 1024):.0f} MiB"


class SizeLimitUploadHandler(FileUploadHandler):
    """Stops reading an upload once it passes the limit (for bodies without a Content-Length, or
    one that lies); the view then reports the limit instead of a file."""

    def __init__(self, request, limit: int):
        super().__init__(request)
        self.limit = limit
        self.received = 0

    def receive_data_chunk(self, raw_data, start):
        self.received += len(raw_data)
        if self.received > self.limit:
            self.request.dataset_upload_too_large = True
            raise StopUpload(connection_reset=False)
        return raw_data  # the next handler (memory or temporary file) stores it

    def file_complete(self, file_size):
        return None


class UploadForm(forms.Form):
    """File(s), kind, name, field mapping and split options of an upload."""

    file = forms.FileField(help_text="JSON Lines (.jsonl), CSV with a header line (.csv) or Parquet (.parquet).")
    dev_file = forms.FileField(required=False, label="Separate dev file",
                               help_text="Optional: a second file whose rows all go to the dev split.")
    kind = forms.ChoiceField(choices=(), help_text="Generic fields:... kinds are those of plugin programs.")
    name = forms.SlugField(max_length=100, required=False, help_text="Letters, digits, - and _.")
    description = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}))
    mapping = forms.CharField(
        required=False, label="Field mapping", widget=forms.Textarea(attrs={"rows": 2, "placeholder": "utterance=text"}),
        help_text="When column names differ from the schema: source=target, one per line or comma-separated.")
    split = forms.ChoiceField(
        choices=[("none", "all rows train (a separate dev file is dev)"), ("field", "by a field"),
                 ("ratio", "a seeded random share is dev")], initial="none", widget=forms.RadioSelect)
    split_field = forms.CharField(required=False, help_text="Field saying train or dev (also test, validation).")
    dev_ratio = forms.FloatField(required=False, min_value=0.0, max_value=0.99, initial=0.1)
    seed = forms.IntegerField(required=False, initial=0)

    def __init__(self, *args, dataset: Dataset | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.dataset = dataset
        # Built per form: plugin programs (loaded on first use) add generic kinds.
        schemas = upload_schemas()
        if dataset is not None and dataset.kind not in {s.kind for s in schemas} and find_schema(dataset.kind):
            schemas.append(find_schema(dataset.kind))  # a generic kind whose program is gone: re-uploads work
        self.fields["kind"].choices = [(s.kind, f"{s.kind}: {s.title}") for s in schemas]
        self.schemas = schemas
        if dataset is not None:
            del self.fields["name"]
            self.fields["kind"].initial = dataset.kind
            self.fields["description"].initial = dataset.description
        self.limit = max_upload_bytes()
        self.fields["file"].help_text += f" At most {_mb(self.limit)}."

    def _check_file(self, name: str):
        upload = self.cleaned_data.get(name)
        if upload is None:
            return upload
        try:
            file_format(upload.name)
        except FileProblem as exc:
            raise forms.ValidationError(str(exc)) from None
        if upload.size > self.limit:
            raise forms.ValidationError(f"{upload.name} is {upload.size / (1024 * 1024):.1f} MiB, over the limit of "
                                        f"{_mb(self.limit)} (COHORT_DATASET_MAX_BYTES).")
        return upload

    def clean_file(self):
        return self._check_file("file")

    def clean_dev_file(self):
        return self._check_file("dev_file")

    def clean_name(self):
        name = self.cleaned_data.get("name")
        if not name:
            raise forms.ValidationError("Give the new dataset a name.")
        if Dataset.objects.filter(name=name).exists():
            raise forms.ValidationError(f"A dataset named {name!r} exists already; upload a new version from its page.")
        return name

    def clean_mapping(self):
        try:
            return parse_mapping(self.cleaned_data.get("mapping") or "")
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None

    def clean(self):
        data = super().clean()
        split = data.get("split")
        if split == "field" and not data.get("split_field"):
            self.add_error("split_field", "Name the field that says train or dev.")
        if split == "ratio" and not data.get("dev_ratio"):
            self.add_error("dev_ratio", "Give the share of rows for dev, e.g. 0.1.")
        if split != "none" and data.get("dev_file"):
            self.add_error("split", "With a separate dev file, every row of the main file is train: choose the first option.")
        if self.dataset is not None and self.dataset.is_importing:
            raise forms.ValidationError(f"Dataset {self.dataset.name!r} is importing already; wait for it to finish.")
        if self.errors or "kind" not in data:
            return data
        try:
            data["options"] = ImportOptions(
                kind=data["kind"], mapping=data.get("mapping") or {},
                split_field=data.get("split_field") if split == "field" else None,
                dev_ratio=data.get("dev_ratio") or 0.0 if split == "ratio" else 0.0, seed=data.get("seed") or 0)
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None
        return data
