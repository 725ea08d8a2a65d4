"""A run's downloads: its metrics as CSV and its rollouts as JSON Lines (streamed), and its trained
adapter. Each is a page a share link opens; an anonymous link's rollouts come without paths or names,
and the adapter only through a link made with the adapter box ticked."""

from django.http import FileResponse, Http404, StreamingHttpResponse
from django.views.decorators.http import require_GET

from webapp.runs.access import link_readable, run_read
from webapp.runs.export import streams as export
from webapp.runs.export.adapters import adapter_folder, zip_folder


@require_GET
@link_readable
def run_export_metrics(request, run_id: int):
    """Every stored step's metrics as CSV, streamed."""
    run = run_read(request, run_id)
    return _download(export.metrics_csv(run), "text/csv; charset=utf-8", f"run-{run.pk}-metrics.csv")


@require_GET
@link_readable
def run_export_rollouts(request, run_id: int):
    """Every rollout with its module calls as JSON Lines, streamed (an anonymous link's without paths)."""
    run = run_read(request, run_id)
    return _download(export.rollouts_jsonl(run, anonymous=run.access.anonymous), "application/x-ndjson; charset=utf-8", f"run-{run.pk}-rollouts.jsonl")


@require_GET
@link_readable
def run_adapter_download(request, run_id: int):
    """The run's trained LoRA adapter as a zip, for its readers, and for a share link made with the
    adapter box ticked (404 otherwise, and while the run has none)."""
    run = run_read(request, run_id)
    folder = adapter_folder(run) if run.access.adapter else None
    if folder is None:
        raise Http404("No trained adapter to download here.")
    return FileResponse(zip_folder(folder), as_attachment=True, filename=f"run-{run.pk}-adapter.zip",
                        content_type="application/zip")


def _download(chunks, content_type: str, filename: str) -> StreamingHttpResponse:
    response = StreamingHttpResponse(chunks, content_type=content_type)
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    return response
