import pytest
from django.db import IntegrityError, transaction

from webapp.datasets.models import Dataset, DatasetRow

pytestmark = pytest.mark.django_db


def test_dataset_rows_unique_by_line_and_by_id():
    ds = Dataset.objects.create(name="bank", kind=Dataset.Kind.CLASSIFICATION)
    other = Dataset.objects.create(name="bank2", kind=Dataset.Kind.CLASSIFICATION)
    DatasetRow.objects.create(dataset=ds, split="train", line_number=1, ext_id="a", data={"text": "x"})
    DatasetRow.objects.create(dataset=other, split="train", line_number=1, ext_id="a", data={})  # per dataset
    with pytest.raises(IntegrityError), transaction.atomic():
        DatasetRow.objects.create(dataset=ds, split="dev", line_number=1, ext_id="b", data={})
    with pytest.raises(IntegrityError), transaction.atomic():
        DatasetRow.objects.create(dataset=ds, split="dev", line_number=2, ext_id="a", data={})
    # A separate dev file (part 1) has its own line numbers.
    DatasetRow.objects.create(dataset=ds, split="dev", part=1, line_number=1, ext_id="c", data={})


def test_dataset_name_unique():
    Dataset.objects.create(name="gsm8k", kind=Dataset.Kind.MATH)
    with pytest.raises(IntegrityError), transaction.atomic():
        Dataset.objects.create(name="gsm8k", kind=Dataset.Kind.MATH)
