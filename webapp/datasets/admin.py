"""Dataset admin: upload (file + options) -> preview of the first rows -> confirm -> queued import,
whose progress the dataset page polls from a small JSON endpoint; deletion refused while in use.

Every view here goes through `admin_site.admin_view` (staff only; others are sent to the admin
login) and needs the Dataset add/change permission. The upload view is CSRF-exempt only so that it
can check Content-Length and install the size-limit upload handler *before* the body is parsed; it
then applies CSRF protection itself.
"""

from __future__ import annotations

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect, JsonResponse
from django.shortcuts import get_object_or_404
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils.html import format_html
from django.views.decorators.csrf import csrf_exempt, csrf_protect

from webapp.datasets.forms import SizeLimitUploadHandler, UploadForm
from webapp.datasets.models import Dataset, DatasetRow
from webapp.datasets.schemas import find_schema, get_schema
from webapp.datasets.services import (
    MAX_ERRORS,
    UploadRefused,
    dataset_preview,
    dataset_users,
    max_upload_bytes,
    upload_confirm,
    upload_discard,
    upload_get,
    upload_stage,
)

# Room for the form's other fields and the multipart boundaries around the file.
FORM_OVERHEAD_BYTES = 256 * 1024


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "status_badge", "row_count", "train_count", "dev_count", "version",
                    "uploaded_by", "updated_at"]
    list_filter = ["kind", "status"]
    search_fields = ["name", "description"]
    fields = ["name", "description", "kind", "source_filename", "status", "row_count", "train_count", "dev_count",
              "version", "imported_at", "uploaded_by", "created_at", "updated_at"]
    readonly_fields = ["kind", "source_filename", "status", "row_count", "train_count", "dev_count", "version",
                       "imported_at", "uploaded_by", "created_at", "updated_at"]
    change_form_template = "admin/datasets/dataset/change_form.html"
    change_list_template = "admin/datasets/dataset/change_list.html"

    @admin.display(description="status", ordering="status")
    def status_badge(self, obj):
        if obj.is_importing:
            return f"{obj.status} ({obj.progress}%)"
        return obj.status

    # --- URLs --------------------------------------------------------------------------------
    def get_urls(self):
        wrap = self.admin_site.admin_view
        return [
            path("upload/", wrap(csrf_exempt(self.upload_view)), name="datasets_dataset_upload"),
            path("upload/<str:token>/", wrap(self.preview_view), name="datasets_dataset_preview"),
            path("<int:object_id>/progress.json", wrap(self.progress_view), name="datasets_dataset_progress"),
            *super().get_urls(),
        ]

    def add_view(self, request, form_url="", extra_context=None):
        # A dataset comes into being through an upload, never as an empty form.
        return HttpResponseRedirect(reverse("admin:datasets_dataset_upload"))

    # --- upload --------------------------------------------------------------------------------
    def upload_view(self, request):
        """Refuses an over-size body by its Content-Length before reading it, installs the
        streaming size check, then handles the form under CSRF protection."""
        dataset = self._dataset_of(request)
        limit = max_upload_bytes()
        if request.method == "POST":
            try:
                length = int(request.META.get("CONTENT_LENGTH") or 0)
            except ValueError:
                length = 0
            if length > limit + FORM_OVERHEAD_BYTES:
                form = UploadForm(dataset=dataset)
                form.too_large = (f"The upload is {length / (1024 * 1024):.1f} MiB, over the limit of "
                                  f"{limit / (1024 * 1024):.0f} MiB (COHORT_DATASET_MAX_BYTES); nothing was read.")
                return self._render_upload(request, form, dataset, status=413)
            request.upload_handlers.insert(0, SizeLimitUploadHandler(request, limit))
        return csrf_protect(self._upload)(request, dataset)

    def _dataset_of(self, request) -> Dataset | None:
        dataset_id = request.GET.get("dataset")
        if not dataset_id:
            if not self.has_add_permission(request):
                raise PermissionDenied
            return None
        if not str(dataset_id).isdigit():
            raise PermissionDenied
        dataset = get_object_or_404(Dataset, pk=int(dataset_id))
        if not self.has_change_permission(request, dataset):
            raise PermissionDenied
        return dataset

    def _upload(self, request, dataset):
        if request.method == "POST":
            form = UploadForm(request.POST, request.FILES, dataset=dataset)
            if getattr(request, "dataset_upload_too_large", False):
                form.too_large = (f"The upload is over the limit of {max_upload_bytes() / (1024 * 1024):.0f} MiB "
                                  "(COHORT_DATASET_MAX_BYTES); it was not stored.")
                return self._render_upload(request, form, dataset, status=413)
            if form.is_valid():
                data = form.cleaned_data
                files = [(data["file"], "auto")] + ([(data["dev_file"], "dev")] if data.get("dev_file") else [])
                meta = {"dataset_id": dataset.pk if dataset else None,
                        "name": dataset.name if dataset else data["name"],
                        "description": data.get("description", ""), "user_id": request.user.pk}
                staged = upload_stage(files, data["options"], meta)
                return HttpResponseRedirect(reverse("admin:datasets_dataset_preview", args=[staged.token]))
        else:
            form = UploadForm(dataset=dataset)
        return self._render_upload(request, form, dataset)

    def _render_upload(self, request, form, dataset, status=200):
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "form": form, "dataset": dataset,
            "title": f"Upload a new version of {dataset.name}" if dataset else "Upload a dataset",
            "schemas": form.schemas, "too_large": getattr(form, "too_large", ""),
        }
        return TemplateResponse(request, "admin/datasets/dataset/upload.html", context, status=status)

    def preview_view(self, request, token):
        """GET: the first rows mapped to the schema with their problems. POST: confirm (queue the
        import) or cancel (drop the staged files)."""
        staged = upload_get(token)
        if staged is None:
            messages.error(request, "This upload is no longer waiting (imported, cancelled or expired); upload it again.")
            return HttpResponseRedirect(reverse("admin:datasets_dataset_upload"))
        dataset_id = staged.manifest.get("dataset_id")
        if dataset_id:
            dataset = Dataset.objects.filter(pk=dataset_id).first()
            if dataset is None or not self.has_change_permission(request, dataset):
                raise PermissionDenied
        elif not self.has_add_permission(request):
            raise PermissionDenied
        if request.method == "POST":
            if "cancel" in request.POST:
                upload_discard(staged.directory)
                messages.info(request, "Upload cancelled; nothing was imported.")
                return HttpResponseRedirect(reverse("admin:datasets_dataset_changelist"))
            try:
                dataset = upload_confirm(staged, user=request.user)
            except UploadRefused as exc:
                messages.error(request, str(exc))
            else:
                messages.success(request, f"Import of {dataset.name} queued; this page shows its progress.")
                return HttpResponseRedirect(reverse("admin:datasets_dataset_change", args=[dataset.pk]))
        preview = dataset_preview(staged.sources, staged.options)
        schema = get_schema(staged.options.kind)
        context = {
            **self.admin_site.each_context(request), "opts": self.model._meta, "title": "Preview the upload",
            "staged": staged, "preview": preview, "schema": schema, "options": staged.options,
            "files": staged.manifest["files"], "name": staged.manifest["name"],
        }
        return TemplateResponse(request, "admin/datasets/dataset/preview.html", context)

    # --- progress -----------------------------------------------------------------------------
    def progress_view(self, request, object_id):
        dataset = get_object_or_404(Dataset, pk=object_id)
        if not self.has_view_permission(request, dataset):
            raise PermissionDenied
        return JsonResponse(dataset_progress(dataset))

    def change_view(self, request, object_id, form_url="", extra_context=None):
        dataset = Dataset.objects.filter(pk=object_id).first() if str(object_id).isdigit() else None
        extra = dict(extra_context or {})
        if dataset is not None:
            extra.update({
                "dataset": dataset, "progress_state": dataset_progress(dataset), "max_errors": MAX_ERRORS,
                "upload_url": f"{reverse('admin:datasets_dataset_upload')}?dataset={dataset.pk}",
                "progress_url": reverse("admin:datasets_dataset_progress", args=[dataset.pk]),
                "schema": find_schema(dataset.kind),
            })
        return super().change_view(request, object_id, form_url, extra)

    # --- deletion --------------------------------------------------------------------------------
    def get_deleted_objects(self, objs, request):
        """Lists the rows as a count (not 13,000 links) and the tasks that protect a dataset."""
        to_delete, protected, counts = [], [], {}
        for dataset in objs:
            users = dataset_users(dataset)
            if users:
                protected += [format_html("dataset “{}” is used by {}", dataset.name, user) for user in users]
                continue
            rows = dataset.rows.count()
            to_delete.append(format_html("Dataset: {} ({} rows)", dataset.name, f"{rows:,}"))
            counts[Dataset._meta.verbose_name_plural] = counts.get(Dataset._meta.verbose_name_plural, 0) + 1
            if rows:
                counts[DatasetRow._meta.verbose_name_plural] = counts.get(DatasetRow._meta.verbose_name_plural, 0) + rows
        perms_needed = set()
        if not self.has_delete_permission(request):
            perms_needed.add(Dataset._meta.verbose_name)
        return to_delete, counts, perms_needed, protected


def dataset_progress(dataset: Dataset) -> dict:
    """What the dataset page polls: the latest upload's status and progress, the stored counts."""
    return {
        "id": dataset.pk, "name": dataset.name, "status": dataset.status, "active": dataset.is_importing,
        "progress": dataset.progress, "note": dataset.progress_note, "rows": dataset.row_count,
        "train": dataset.train_count, "dev": dataset.dev_count, "version": dataset.version,
        "error_count": dataset.error_count, "errors": dataset.errors[:MAX_ERRORS],
    }


@admin.register(DatasetRow)
class DatasetRowAdmin(admin.ModelAdmin):
    """Rows are read-only: they change only as a whole, by importing a new version."""

    list_display = ["dataset", "split", "part", "line_number", "ext_id"]
    list_filter = ["split", "dataset"]
    search_fields = ["ext_id"]
    list_select_related = ["dataset"]
    raw_id_fields = ["dataset"]

    def has_add_permission(self, request):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False
