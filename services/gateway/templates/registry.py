"""Loading templates from YAML (strict: a duplicate key is an error; bounded in bytes and in
nesting), the shipped workflows (``workflows/*.yaml``), and the registry of templates by id and
version."""

from __future__ import annotations

from collections.abc import Hashable
from pathlib import Path
from typing import Any

import yaml

from services.common.values.errors import (
    AlreadyExists,
    FailedPrecondition,
    InvalidArgument,
    NotFound,
    PayloadTooLarge,
    ResourceExhausted,
    quoted,
)
from services.gateway.templates.model import DecisionPoint, Template, TemplateError
from services.gateway.templates.parse import parse_template

WORKFLOWS_DIR = Path(__file__).with_name("workflows")
#: Largest template document accepted, in UTF-8 bytes.
MAX_TEMPLATE_BYTES = 256 * 1024
#: Deepest nesting of YAML nodes accepted (the schema needs 8: the root, ``decisions``, a
#: decision, ``per_candidate``, a chain, a step, its ``bind``, a source). The bound also keeps
#: PyYAML's recursive composer far from Python's recursion limit (a RecursionError otherwise).
MAX_TEMPLATE_DEPTH = 16
#: Most YAML nodes (keys, values, list items) accepted: a shipped template has about 100, one
#: of 256 plain stages about 4,000. Pure-Python YAML costs ~15-50 µs a node, so this bounds a
#: document's parse to well under a second (256 KiB of one-character list items is 65,000
#: nodes and took 6 s).
MAX_TEMPLATE_NODES = 16_384


class _Refused(yaml.YAMLError):
    """A document past a bound of the loader, named with where it was when it stopped."""

    def __init__(self, what: str, mark: Any) -> None:
        super().__init__(f"{what} (at line {mark.line + 1}, column {mark.column + 1})")


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that refuses duplicate keys instead of keeping the last one, and
    documents nested deeper than ``MAX_TEMPLATE_DEPTH`` or of more than ``MAX_TEMPLATE_NODES``
    nodes."""

    _depth = 0
    _nodes = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        self._nodes += 1
        try:  # the root is never refused: neither bound is below 1
            if self._depth > MAX_TEMPLATE_DEPTH:
                raise _Refused(f"nested deeper than {MAX_TEMPLATE_DEPTH} levels",
                               parent.start_mark)
            if self._nodes > MAX_TEMPLATE_NODES:
                raise _Refused(f"more than {MAX_TEMPLATE_NODES} YAML nodes (keys, values and "
                               "list items)", parent.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if isinstance(key, Hashable) and key in seen:  # unhashable: the base class says so
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {quoted(key)}", key_node.start_mark)
            if isinstance(key, Hashable):
                seen.add(key)
        return super().construct_mapping(node, deep=deep)


def parse_template_yaml(text: str, field: str = "yaml") -> Template:
    """Validate a template document sent as YAML text (the ``field`` of a request)."""
    if len(text) > MAX_TEMPLATE_BYTES // 4 and len(text.encode()) > MAX_TEMPLATE_BYTES:
        raise PayloadTooLarge(field, f"larger than {MAX_TEMPLATE_BYTES} bytes")
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _Refused as exc:
        raise InvalidArgument(field, str(exc)) from None
    except yaml.YAMLError as exc:
        raise InvalidArgument(field, f"not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise InvalidArgument(field, "must be a mapping (a template document)")
    return parse_template(data)


def load_template(path: str | Path) -> Template:
    """Read and validate one template YAML file."""
    path = Path(path)
    try:
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=_StrictLoader)
    except FileNotFoundError:
        raise NotFound(f"template file {path} does not exist") from None
    except yaml.YAMLError as exc:
        raise TemplateError(path.stem, "<yaml>", " ".join(str(exc).split())) from None
    return parse_template(data)


def builtin_names() -> tuple[str, ...]:
    """Names of the templates shipped in ``services/gateway/templates/workflows``."""
    return tuple(sorted(p.stem for p in WORKFLOWS_DIR.glob("*.yaml")))


def load_builtin(name: str) -> Template:
    """Load a shipped template by name (``routing``, ``react``, ``subagent``, ``hci``)."""
    if name not in builtin_names():
        raise NotFound(f"no builtin template {quoted(name)} (have: {', '.join(builtin_names())})")
    return load_template(WORKFLOWS_DIR / f"{name}.yaml")


class TemplateRegistry:
    """Registered templates by id and version; a changed body needs a higher version."""

    def __init__(self, max_templates: int = 1024) -> None:
        self._by_id: dict[str, dict[int, Template]] = {}
        #: Template versions kept at most; one more is refused (``ResourceExhausted``).
        self.max_templates = max_templates
        self._count = 0

    def register(self, template: Template) -> Template:
        """Register ``template``: a no-op for an identical body, refused for a conflicting one
        and, past ``max_templates`` versions, refused as overload."""
        versions = self._by_id.get(template.id, {})
        known = versions.get(template.version)
        if known is None and self._count >= self.max_templates:
            raise ResourceExhausted(f"template {template.id}: {self.max_templates} template "
                                    "versions are registered (max_templates)")
        versions = self._by_id.setdefault(template.id, versions)
        if known is not None and known != template:
            raise AlreadyExists(f"template {template.id} version {template.version} is "
                                "registered with a different body; register a higher version")
        latest = max(versions, default=0)
        if known is None and template.version < latest:
            raise FailedPrecondition(f"template {template.id}: version {template.version} is "
                                     f"older than the registered version {latest}")
        if known is None:
            self._count += 1
        return versions.setdefault(template.version, template)

    def get(self, template_id: str, version: int | None = None) -> Template:
        """The template's given version, else its latest; ``NotFound`` when absent."""
        versions = self._by_id.get(template_id, {})
        found = versions.get(max(versions, default=0) if version is None else version)
        if found is None:
            raise NotFound(f"template {quoted(template_id)}"
                           f"{'' if version is None else f' version {version}'} is not registered")
        return found

    def decision(self, coordinate: str) -> DecisionPoint:
        """The decision point at ``template_id/stage_id`` in the latest version."""
        return self.get(coordinate.partition("/")[0]).decision(coordinate)

    def ids(self) -> tuple[str, ...]:
        """Registered template ids, sorted."""
        return tuple(sorted(self._by_id))


__all__ = ["MAX_TEMPLATE_BYTES", "MAX_TEMPLATE_DEPTH", "MAX_TEMPLATE_NODES", "WORKFLOWS_DIR",
           "TemplateRegistry", "builtin_names", "load_builtin", "load_template",
           "parse_template_yaml"]
