"""The runs page's "Import runs" form: another trainer's files uploaded and stored as imported runs
(webapp/runs/ingest/uploads.py does the work; the same readers as `cohort import`)."""

from __future__ import annotations

from django import forms
from django.contrib import messages
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from trainer.run import events
from webapp.projects.selectors import launchable_projects, personal_project
from webapp.runs.ingest.external import ExternalConflict, ExternalLimit
from webapp.runs.ingest.uploads import UploadRefused, max_upload_bytes, upload_import
from webapp.runs.launch.check import LaunchRefused, tags_checked


class MultipleFiles(forms.ClearableFileInput):
    allow_multiple_selected = True


class MultipleFileField(forms.FileField):
    """Several files in one field (Django's documented pattern): a list of the uploaded files."""

    def clean(self, data, initial=None):
        one = super().clean
        return [one(item, initial) for item in data] if isinstance(data, list | tuple) else [one(data, initial)]


class ImportForm(forms.Form):
    files = MultipleFileField(widget=MultipleFiles(attrs={"multiple": True}), help_text=(
        "A W&B run file (run-*.wandb), a TensorBoard event file, verl's file log (.jsonl), or a .zip of a "
        "folder of them (a W&B offline-run folder with its tables, a TensorBoard log folder, a verl run folder "
        "with its rollout dumps)."))
    task = forms.RegexField(regex=rf"^{events.SLUG_PATTERN}$", max_length=events.MAX_TASK, initial="imported", help_text=(
        "The Cohort task the runs belong to: runs of one task sit side by side on the compare page."))
    project = forms.ModelChoiceField(queryset=None, required=False, empty_label="my personal project")
    tags = forms.CharField(required=False, help_text="Comma-separated.")
    skip_bad = forms.BooleanField(required=False, label="Skip bad records", help_text=(
        "Import what is sound and list each bad record. Without it, a bad record imports nothing."))

    def __init__(self, *args, user, **kwargs):
        super().__init__(*args, **kwargs)
        self.fields["project"].queryset = launchable_projects(user)

    def clean_tags(self):
        try:  # the launch check's rule for a run's tags, as every door applies it
            return tags_checked([t.strip() for t in self.cleaned_data["tags"].split(",") if t.strip()])
        except LaunchRefused as refused:
            raise forms.ValidationError(refused.errors["tags"]) from None


@require_http_methods(["GET", "POST"])
def runs_import(request):
    if request.method == "GET":
        return _render(request, ImportForm(user=request.user))
    length = int(request.META.get("CONTENT_LENGTH") or 0)
    if length > max_upload_bytes() + 1024 * 1024:  # refused before Django reads the body
        form = ImportForm(user=request.user)
        form.errors["files"] = form.error_class([f"The upload is {length / 2**20:,.1f} MB; the limit is "
                                                 f"{max_upload_bytes() // 2**20} MB. Import a larger run with "
                                                 "`cohort import`."])
        return _render(request, form, status=413)
    form = ImportForm(request.POST, request.FILES, user=request.user)
    if not form.is_valid():
        return _render(request, form, status=400)
    data = form.cleaned_data
    try:
        imported = upload_import(request.user, data["files"], project=data["project"] or personal_project(request.user),
                                 task=data["task"], tags=data["tags"], skip_bad=data["skip_bad"])
    except (UploadRefused, ExternalConflict, ExternalLimit) as refused:
        form.add_error("files", str(refused))
        return _render(request, form, status=400)
    if not imported.runs:
        form.add_error("files", "No run was found in the upload.")
        return _render(request, form, status=400)
    for line in imported.skipped[:20]:
        messages.warning(request, f"Skipped: {line}")
    names = ", ".join(run.name or f"run {run.pk}" for run in imported.runs)
    messages.success(request, f"Imported {len(imported.runs)} run(s): {names}.")
    if len(imported.runs) == 1:
        return redirect(reverse("runs:detail", args=[imported.runs[0].pk]))
    return redirect(reverse("runs:list"))


def _render(request, form, status: int = 200):
    return render(request, "runs/import.html", {"form": form, "limit_mb": max_upload_bytes() // 2**20}, status=status)
