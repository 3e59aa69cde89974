"""The shared data sets' loaders: a missing file is named, the real samples load."""

from __future__ import annotations

from pathlib import Path

import pytest

from services.common.values.errors import NotFound
from services.corpus import Corpus
from services.corpus.loaders import (
    HOTPOTQA_FILE,
    MAGENTO_DIR,
    MUSIQUE_FILE,
    DataUnavailable,
    data_path,
    default_data_dir,
    hotpotqa_documents,
    load_corpus,
    magento_documents,
    musique_documents,
)

DATA = default_data_dir()


def test_loaders_name_a_missing_data_file(tmp_path: Path) -> None:
    with pytest.raises(NotFound, match="hotpotqa"):
        list(hotpotqa_documents(tmp_path))


@pytest.mark.skipif(not (DATA / HOTPOTQA_FILE).exists(), reason=f"shared data absent: {DATA}")
def test_real_hotpotqa_sample_loads_and_answers_a_search(tmp_path: Path) -> None:
    with Corpus(tmp_path / "h", "hotpotqa", sync=False) as corpus:
        count = load_corpus(corpus, "hotpotqa")
        assert count == len(corpus) > 1000 and load_corpus(corpus, "hotpotqa") == 0
        assert corpus.search("Neil Peart drummer", k=3).hits[0].title == "Neil Peart"


@pytest.mark.skipif(not (DATA / MUSIQUE_FILE).exists(), reason=f"shared data absent: {DATA}")
def test_real_musique_paragraphs_are_distinct_documents() -> None:
    docs = list(musique_documents())
    assert len(docs) == len({d.doc_id for d in docs}) > 3000


@pytest.mark.skipif(not (DATA / MAGENTO_DIR).exists(), reason=f"shared data absent: {DATA}")
def test_real_magento_products_have_text_without_html() -> None:
    docs = list(magento_documents())
    assert len(docs) > 150 and not any("<p>" in d.text for d in docs)


def test_data_path_names_the_file_and_an_unknown_loader_is_refused(tmp_path: Path) -> None:
    with pytest.raises(DataUnavailable, match="absent.jsonl"):
        data_path(tmp_path, "absent.jsonl")
    with Corpus(tmp_path / "c", "c", sync=False) as corpus, \
            pytest.raises(NotFound, match="no loader 'wikipedia'"):
        load_corpus(corpus, "wikipedia", tmp_path)
