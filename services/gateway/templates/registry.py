"""Loading templates from YAML (strict: a duplicate key is an error; bounded in bytes and in
nesting), the shipped workflows (``workflows/*.yaml``), and the registry of templates by id and
version."""

from __future__ import annotations

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


class _TooDeep(yaml.YAMLError):
    """A document nested deeper than ``MAX_TEMPLATE_DEPTH``; names where the too-deep
    collection starts."""

    def __init__(self, mark: Any) -> None:
        super().__init__(f"nested deeper than {MAX_TEMPLATE_DEPTH} levels (the collection at "
                         f"line {mark.line + 1}, column {mark.column + 1})")


class _StrictLoader(yaml.SafeLoader):
    """Safe YAML loader that refuses duplicate keys instead of keeping the last one, and
    documents nested deeper than ``MAX_TEMPLATE_DEPTH``."""

    _depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        self._depth += 1
        try:
            if self._depth > MAX_TEMPLATE_DEPTH:  # only below a collection: never the root
                raise _TooDeep(parent.start_mark)
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node: Any, deep: bool = False) -> dict[Any, Any]:
        keys = [self.construct_object(k, deep=deep) for k, _ in node.value]
        for i, key in enumerate(keys):
            if key in keys[:i]:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {quoted(key)}", node.value[i][0].start_mark)
        return super().construct_mapping(node, deep=deep)


def parse_template_yaml(text: str, field: str = "yaml") -> Template:
    """Validate a template document sent as YAML text (the ``field`` of a request)."""
    if len(text) > MAX_TEMPLATE_BYTES // 4 and len(text.encode()) > MAX_TEMPLATE_BYTES:
        raise PayloadTooLarge(field, f"larger than {MAX_TEMPLATE_BYTES} bytes")
    try:
        data = yaml.load(text, Loader=_StrictLoader)
    except _TooDeep as exc:
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


__all__ = ["MAX_TEMPLATE_BYTES", "MAX_TEMPLATE_DEPTH", "WORKFLOWS_DIR", "TemplateRegistry",
           "builtin_names", "load_builtin", "load_template", "parse_template_yaml"]
