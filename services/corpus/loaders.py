"""Documents from the shared data sets, read at run time (never copied into the repo).

The data folder is ``$DYNBRANCH_DATA_DIR``, else ``shared/data`` beside the repository
(``<repo>/../shared/data``): ``default_data_dir`` is the one place it is resolved, and the
commands' ``--data-dir`` sets the variable. Each loader takes another folder as an argument.
See each data set's ``SOURCE.md`` for fields.

- ``hotpotqa``: context paragraphs of the distractor sample; id = title (deduplicated).
- ``musique``: the 20 paragraphs of each sampled question; id = ``title#<digest of text>``
  (one title can have several paragraphs).
- ``magento``: the Luma store's visible products (configurable parents and gear); id = SKU,
  text = description without HTML, then categories and price.
"""

from __future__ import annotations

import csv
import hashlib
import html
import json
import re
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from services.common.values.config import environment_value, export_environment_value
from services.common.values.errors import NotFound
from services.corpus.codec import Document
from services.corpus.core import Corpus

REPO_ROOT = Path(__file__).resolve().parents[2]
#: The environment variable naming the shared data sets' folder.
DATA_DIR_ENV = "DYNBRANCH_DATA_DIR"
HOTPOTQA_FILE = "hotpotqa/hotpot_dev_distractor_v1_sample200.jsonl"
MUSIQUE_FILE = "musique/musique_ans_v1.0_dev_sample200.jsonl"
MAGENTO_DIR = "magento_luma_shopping"
_TAG = re.compile(r"<[^>]+>")


def default_data_dir() -> Path:
    """The shared data sets' folder: ``$DYNBRANCH_DATA_DIR``, else ``shared/data`` next to the
    repository."""
    return Path(environment_value(DATA_DIR_ENV) or REPO_ROOT.parent / "shared" / "data")


def use_data_dir(folder: str | Path) -> None:
    """Make ``folder`` the data sets' folder of this process and of those it starts."""
    export_environment_value(DATA_DIR_ENV, str(Path(folder).resolve()))


class DataUnavailable(NotFound):
    """A data set file is absent (the shared data sets not mounted); the message names it."""


def require_data(relatives: Iterable[str], data_dir: str | Path | None = None) -> None:
    """``DataUnavailable`` naming every file of ``relatives`` absent from the data folder."""
    root = Path(data_dir or default_data_dir())
    missing = [r for r in dict.fromkeys(relatives) if not (root / r).exists()]
    if missing:
        raise DataUnavailable(_absent(root, missing))


def data_path(data_dir: str | Path | None, relative: str) -> Path:
    """A file of the shared data sets; ``DataUnavailable`` naming it when it is absent."""
    root = Path(data_dir or default_data_dir())
    if not (root / relative).exists():
        raise DataUnavailable(_absent(root, [relative]))
    return root / relative


def _absent(root: Path, missing: list[str]) -> str:
    """One line: what is absent and how to supply it."""
    what = (f"folder {root} does not exist" if not root.is_dir()
            else f"{', '.join(missing)} not in {root}")
    return (f"shared data sets absent: {what}; put the data sets there, or point --data-dir DIR "
            f"(or {DATA_DIR_ENV}) at the folder that holds them (default: "
            f"{REPO_ROOT.parent / 'shared' / 'data'})")


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The records of a JSON Lines file."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            if line.strip():
                yield json.loads(line)


def hotpotqa_records(data_dir: str | Path | None = None) -> Iterator[dict[str, Any]]:
    """The HotpotQA sample's question records as stored."""
    return read_jsonl(data_path(data_dir, HOTPOTQA_FILE))


def hotpotqa_documents(data_dir: str | Path | None = None) -> Iterator[Document]:
    """Every distinct context paragraph, one document per title."""
    seen: set[str] = set()
    for record in hotpotqa_records(data_dir):
        for title, sentences in record["context"]:
            if title not in seen:
                seen.add(title)
                yield Document(title, title, "".join(sentences).strip())


def musique_documents(data_dir: str | Path | None = None) -> Iterator[Document]:
    """Every distinct (title, paragraph) of the MuSiQue sample."""
    seen: set[str] = set()
    for record in read_jsonl(data_path(data_dir, MUSIQUE_FILE)):
        for paragraph in record["paragraphs"]:
            title, text = paragraph["title"], paragraph["paragraph_text"]
            doc_id = f"{title}#{hashlib.blake2b(text.encode(), digest_size=5).hexdigest()}"
            if doc_id not in seen:
                seen.add(doc_id)
                yield Document(doc_id, title, text)


def magento_documents(data_dir: str | Path | None = None) -> Iterator[Document]:
    """Visible Luma products: configurable parents, then the gear catalogue."""
    folder = data_path(data_dir, MAGENTO_DIR)
    csv.field_size_limit(1 << 24)
    files = [folder / "ConfigurableSampleData_products.csv",
             *sorted(folder.glob("CatalogSampleData_SimpleProduct_products_gear_*.csv"))]
    seen: set[str] = set()
    for path in files:
        with path.open(encoding="utf-8", newline="") as rows:
            for row in csv.DictReader(rows):
                if row.get("visibility") == "Not Visible Individually" or row["sku"] in seen:
                    continue
                seen.add(row["sku"])
                yield Document(row["sku"], row["name"], _product_text(row))


def _product_text(row: dict[str, str]) -> str:
    text = " ".join(html.unescape(_TAG.sub(" ", row.get("description", ""))).split())
    categories = row.get("categories") or row.get("category", "")
    return f"{text}\nCategories: {categories}\nPrice: {row.get('price', '')}"


LOADERS: dict[str, Callable[[str | Path | None], Iterator[Document]]] = {
    "hotpotqa": hotpotqa_documents, "musique": musique_documents, "magento": magento_documents,
}


def load_corpus(corpus: Corpus, source: str, data_dir: str | Path | None = None) -> int:
    """Bulk-load ``source`` into an empty corpus (a no-op returning 0 once it holds documents)."""
    if source not in LOADERS:
        raise NotFound(f"no loader {source!r} (have: {', '.join(sorted(LOADERS))})")
    if len(corpus):
        return 0
    return corpus.load_documents(LOADERS[source](data_dir))


__all__ = [
    "DATA_DIR_ENV", "LOADERS", "DataUnavailable", "data_path", "default_data_dir",
    "hotpotqa_documents", "hotpotqa_records", "load_corpus", "magento_documents",
    "musique_documents", "read_jsonl", "require_data", "use_data_dir",
]
