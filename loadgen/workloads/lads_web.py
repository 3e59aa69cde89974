"""Web observations for the LADS Web-derived burst replay (LADS §5.1), as plain text.

WebArena's shopping database is not public, so the catalogue is the Magento 2 Luma sample
store (same platform and schema; see ``../shared/data/magento_luma_shopping/SOURCE.md``) and
the tasks are WebArena's shopping intents (``../shared/data/webarena_tasks/SOURCE.md``).

For each task this module renders what a ReAct Web agent would read: an ``open`` product page
(name, SKU, price, description without HTML, attributes) or a ``read_reviews`` page (title,
rating, nickname, detail per review). Reviewed products are picked by a deterministic keyword
match of the intent against product names and categories; when fewer than enough products
match, the rest are picked with a ``random.Random`` seeded by the task id (so the same for every
workload seed: the paper's seeds vary only arrivals and history assignment). Nothing here depends on
the workload seed or the tokenizer; ``lads`` sizes and assembles the workflows.
"""

from __future__ import annotations

import csv
import functools
import html
import random
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadgen.workloads.base import data_path, read_jsonl

TASKS_FILE = "webarena_tasks/test.raw.shopping.jsonl"
MAGENTO_DIR = "magento_luma_shopping"
PRODUCTS_FILE = f"{MAGENTO_DIR}/ConfigurableSampleData_products.csv"
GEAR_GLOB = "CatalogSampleData_SimpleProduct_products_gear_*.csv"
REVIEWS_FILE = f"{MAGENTO_DIR}/ReviewSampleData_products_reviews.csv"
#: An observation is cut at this many UTF-8 bytes (a page as the agent's tool returns it).
MAX_OBSERVATION_BYTES = 4096
#: Gear CSV columns that are bookkeeping, not product attributes.
_GEAR_SKIP = frozenset({"category", "name", "sku", "price", "qty", "description",
                        "special_price", "attribute_set"})
_ATTR_SKIP = frozenset({"has_options", "required_options"})
_TAG = re.compile(r"<[^>]+>")
_WORD = re.compile(r"[a-z]+")
#: Intent words too generic to say which product is meant.
_STOP = frozenset(
    "the and for with from that this what which who how when where show tell list find give "
    "me my i you your our any all some most least best price range product products item items "
    "category categories one stop market site shop store order orders bought buy add about "
    "between under over than available review reviews customer customers rating rate star stars "
    "mention mentions say says complain brand model models get now help lot want browse full "
    "new recent number".split())


@dataclass(frozen=True, slots=True)
class ShoppingTask:
    """One WebArena shopping task: its id and natural-language intent."""

    task_id: int
    intent: str


@dataclass(frozen=True, slots=True)
class Product:
    """One visible Luma product, ready to render."""

    sku: str
    name: str
    price: str
    categories: str
    description: str
    attributes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class Review:
    """One product review as a shopper sees it."""

    title: str
    rating: int
    nickname: str
    detail: str


def shopping_tasks(n: int = 16, data_dir: str | Path | None = None) -> tuple[ShoppingTask, ...]:
    """The first ``n`` shopping-only tasks of distinct intent templates, in file order."""
    tasks = _tasks(_key(data_dir))
    if n > len(tasks):
        raise ValueError(f"asked for {n} shopping tasks but {TASKS_FILE} yields {len(tasks)}")
    return tasks[:n]


def catalog(data_dir: str | Path | None = None) -> tuple[Product, ...]:
    """Every visible product: configurable parents, then the gear files."""
    return _catalog(_key(data_dir))


def reviews_of(sku: str, data_dir: str | Path | None = None) -> tuple[Review, ...]:
    """The reviews of one SKU, in file order (empty when it has none)."""
    return _reviews(_key(data_dir)).get(sku, ())


def pick_products(intent: str, task_id: int, k: int,
                  data_dir: str | Path | None = None) -> tuple[tuple[Product, ...], int]:
    """``k`` reviewed products for a task and how many of them the keyword match found.

    Only products with reviews qualify, so ``read_reviews`` always has text to read. They
    score one point per intent keyword among their name and category words, ties in
    catalogue order; unmatched slots are filled with a pick seeded by ``task_id``.
    """
    reviewed = _reviews(_key(data_dir))
    products = [p for p in catalog(data_dir) if p.sku in reviewed]
    words = _keywords(intent)
    scored = sorted((-_score(words, p), i) for i, p in enumerate(products))
    matched = [products[i] for score, i in scored if score < 0][:k]
    rest = [p for p in products if p not in matched]
    fill = random.Random(f"lads-web-task-{task_id}").sample(rest, k - len(matched))
    return tuple(matched + fill), len(matched)


def render_open(product: Product) -> str:
    """The ``open`` tool's text of a product page."""
    lines = [f"{product.name}", f"SKU: {product.sku}", f"Price: ${product.price}",
             f"Categories: {product.categories}", "", product.description, ""]
    lines += [f"{name}: {value}" for name, value in product.attributes]
    return cap_bytes("\n".join(lines))


def render_reviews(product: Product, data_dir: str | Path | None = None) -> str:
    """The ``read_reviews`` tool's text: every review of a product."""
    reviews = reviews_of(product.sku, data_dir)
    if not reviews:
        return f"Reviews of {product.name} ({product.sku})\nNo reviews yet."
    mean = sum(r.rating for r in reviews) / len(reviews)
    parts = [f"Reviews of {product.name} ({product.sku}): {len(reviews)} reviews, "
             f"average rating {mean:.1f} of 5"]
    parts += [f"\n{r.title}\nRating: {r.rating} of 5, by {r.nickname}\n{r.detail}"
              for r in reviews]
    return cap_bytes("\n".join(parts))


def catalog_pages(start: int, data_dir: str | Path | None = None) -> Iterator[str]:
    """Product pages from ``start`` on, cycling the catalogue (a history's earlier browsing)."""
    products = catalog(data_dir)
    index = start % len(products)
    while True:
        yield render_open(products[index])
        index = (index + 1) % len(products)


def cap_bytes(text: str, limit: int = MAX_OBSERVATION_BYTES) -> str:
    """``text`` cut to at most ``limit`` UTF-8 bytes (never inside a character)."""
    return text.encode()[:limit].decode(errors="ignore")


def sources() -> tuple[str, ...]:
    """The data files this module reads, relative to the data root."""
    return (TASKS_FILE, PRODUCTS_FILE, f"{MAGENTO_DIR}/{GEAR_GLOB}", REVIEWS_FILE)


def _key(data_dir: str | Path | None) -> str:
    # The caches are keyed by the folder's resolved path, so every spelling shares one parse.
    return str(data_path(data_dir, ".").resolve())


@functools.lru_cache(maxsize=4)
def _tasks(root: str) -> tuple[ShoppingTask, ...]:
    seen: set[int] = set()
    tasks = []
    for record in read_jsonl(data_path(root, TASKS_FILE)):
        if record["sites"] == ["shopping"] and record["intent_template_id"] not in seen:
            seen.add(record["intent_template_id"])
            tasks.append(ShoppingTask(int(record["task_id"]), record["intent"].strip()))
    return tuple(tasks)


@functools.lru_cache(maxsize=4)
def _catalog(root: str) -> tuple[Product, ...]:
    csv.field_size_limit(1 << 24)
    rows = [(row, _configurable_attributes(row)) for row in _rows(data_path(root, PRODUCTS_FILE))
            if row["product_type"] == "configurable"]
    for path in sorted(data_path(root, MAGENTO_DIR).glob(GEAR_GLOB)):
        rows += [(row, _gear_attributes(row)) for row in _rows(path)]
    return tuple(_product(row, attributes) for row, attributes in rows)


@functools.lru_cache(maxsize=4)
def _reviews(root: str) -> dict[str, tuple[Review, ...]]:
    by_sku: dict[str, list[Review]] = {}
    for row in _rows(data_path(root, REVIEWS_FILE)):
        review = Review(row["title"].strip(), int(row["rating_value"]), row["reviewer"].strip(),
                        row["review"].strip())
        by_sku.setdefault(row["sku"], []).append(review)
    return {sku: tuple(reviews) for sku, reviews in by_sku.items()}


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as rows:
        return list(csv.DictReader(rows))


def _product(row: dict[str, str], attributes: tuple[tuple[str, str], ...]) -> Product:
    categories = row.get("categories") or row.get("category", "")
    categories = ", ".join(c.replace("Default Category/", "").replace("\n", "/")
                           for c in categories.split(",") if c != "Default Category")
    return Product(row["sku"], _plain(row["name"]), row["price"], categories,
                   _plain(row["description"]), attributes)


def _plain(markup: str) -> str:
    return " ".join(html.unescape(_TAG.sub(" ", markup)).split())


def _configurable_attributes(row: dict[str, str]) -> tuple[tuple[str, str], ...]:
    pairs = [p.split("=", 1) for p in row["additional_attributes"].split(",") if "=" in p]
    attributes = [(_label(k), v.replace("|", ", ")) for k, v in pairs if k not in _ATTR_SKIP]
    variants = [dict(f.split("=", 1) for f in v.split(",") if "=" in f)
                for v in row["configurable_variations"].split("|") if v]
    for option in ("size", "color"):
        values = list(dict.fromkeys(v[option] for v in variants if option in v))
        if values:
            attributes.append((_label(option), ", ".join(values)))
    return tuple(attributes)


def _gear_attributes(row: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple((_label(k), v.replace("|", ", ")) for k, v in row.items()
                 if k not in _GEAR_SKIP and v)


def _label(key: str) -> str:
    return key.replace("_", " ").capitalize()


@functools.lru_cache(maxsize=1024)
def _keywords(text: str) -> frozenset[str]:
    return frozenset(_stem(w) for w in _WORD.findall(text.lower())
                     if len(w) > 2 and w not in _STOP)


def _score(keywords: frozenset[str], product: Product) -> int:
    return len(keywords & _keywords(f"{product.name} {product.categories}"))


def _stem(word: str) -> str:
    # Crude plural folding is enough to match "bags" with "Bag" and "shoes" with "shoe".
    return word[:-1] if word.endswith("s") and not word.endswith("ss") else word


__all__ = [
    "MAX_OBSERVATION_BYTES", "Product", "Review", "ShoppingTask", "cap_bytes", "catalog",
    "catalog_pages", "pick_products", "render_open", "render_reviews", "reviews_of",
    "shopping_tasks", "sources",
]
