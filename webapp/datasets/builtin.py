"""The real datasets shipped in `../shared/data/` (see its README) as Cohort datasets.

Each entry names the dataset, its kind, its files and how they split: where the source has a
separate evaluation file, that file is the dev split; HoVer ships one file, so a seeded 20% of it
is dev. `manage.py import_builtin_datasets` imports them through the same service as the admin, then
`manage.py create_builtin_tasks` defines the ready-made tasks on them (`webapp.runs.launch.catalog`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from webapp.datasets.models import Dataset
from webapp.datasets.services import ImportOptions, ImportResult, SourceFile, dataset_import
from webapp.paths import BASE_DIR

DEFAULT_DATA_DIR = BASE_DIR.parent / "shared" / "data"


@dataclass(frozen=True)
class BuiltinDataset:
    name: str
    kind: str
    train: str  # file relative to the data folder
    dev: str | None = None  # a separate evaluation file, all dev
    dev_ratio: float = 0.0  # else a seeded share of `train`
    description: str = ""

    def sources(self, data_dir: Path) -> list[SourceFile]:
        files = [SourceFile(str(data_dir / self.train), Path(self.train).name)]
        if self.dev:
            files.append(SourceFile(str(data_dir / self.dev), Path(self.dev).name, "dev"))
        return files

    def import_options(self) -> ImportOptions:
        return ImportOptions(kind=self.kind, dev_ratio=self.dev_ratio, seed=0)


BUILTIN_DATASETS = (
    BuiltinDataset("banking77", "classification", "banking77/train.jsonl", "banking77/test.jsonl",
                   description="Banking77 intent classification, 77 labels (CC BY 4.0, PolyAI)."),
    BuiltinDataset("gsm8k", "math", "gsm8k/train.jsonl", "gsm8k/test.jsonl",
                   description="GSM8K grade-school math: first 1,000 train problems, the whole test set (MIT, OpenAI)."),
    BuiltinDataset("hotpotqa", "qa", "hotpotqa/train.jsonl", "hotpotqa/dev.jsonl",
                   description="HotpotQA hard multi-hop questions (CC BY-SA 4.0); retrieve from hotpotqa-corpus."),
    BuiltinDataset("hotpotqa-corpus", "corpus", "hotpotqa/corpus.jsonl",
                   description="The 4,429 context paragraphs of the hotpotqa questions (CC BY-SA 4.0)."),
    BuiltinDataset("hover", "claim", "hover/dev.jsonl", dev_ratio=0.2,
                   description="HoVer many-hop claims, a seeded 600 of the dev release (CC BY-SA 4.0); "
                               "a seeded 20% is the dev split."),
    BuiltinDataset("toolrl", "toolcall", "toolrl/sft.jsonl", "toolrl/test.jsonl",
                   description="ToolRL tool-calling data: the 399 SFT rows to train, the 80 RL test rows as dev."),
    BuiltinDataset("pupa", "privacy", "pupa/new.jsonl", "pupa/tnb.jsonl",
                   description="PAPILLON PUPA privacy-conscious delegation; TNB (the paper's evaluation set) is dev. "
                               "Contains real user queries with PII."),
)


def builtin_dataset_import(spec: BuiltinDataset, data_dir: Path = DEFAULT_DATA_DIR, *, user=None
                           ) -> tuple[Dataset, ImportResult]:
    """Imports (or re-imports, as a new version) one built-in dataset from `data_dir`."""
    dataset, _ = Dataset.objects.get_or_create(
        name=spec.name, defaults={"kind": spec.kind, "description": spec.description, "uploaded_by": user})
    return dataset, dataset_import(dataset, spec.sources(Path(data_dir)), spec.import_options())
