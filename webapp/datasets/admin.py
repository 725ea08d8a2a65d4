from django.contrib import admin

from webapp.datasets.models import Dataset, DatasetRow


@admin.register(Dataset)
class DatasetAdmin(admin.ModelAdmin):
    list_display = ["name", "kind", "status", "row_count", "train_count", "dev_count", "uploaded_by", "updated_at"]
    list_filter = ["kind", "status"]
    search_fields = ["name", "description"]
    readonly_fields = ["status", "row_count", "train_count", "dev_count", "errors", "created_at", "updated_at"]


@admin.register(DatasetRow)
class DatasetRowAdmin(admin.ModelAdmin):
    list_display = ["dataset", "split", "line_number", "ext_id"]
    list_filter = ["split", "dataset"]
    search_fields = ["ext_id"]
    list_select_related = ["dataset"]
    raw_id_fields = ["dataset"]
