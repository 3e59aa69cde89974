"""Workflow templates (DESIGN.md §3): the model (``model``), parsing (``parse``), graph checks
(``graph``), rendering a stage into its exact input (``render``), loading, the shipped workflows
(``workflows/*.yaml``) and the registry (``registry``), behind one import.

May import: ``services.common`` and the gateway's ``tools.base`` (builtin tool specs); every other
gateway module may import templates.
"""

from services.gateway.templates.model import (
    PLACEHOLDER,
    Binding,
    CandidateSpace,
    ChainStep,
    DecisionPoint,
    PlaceholderSource,
    Scalar,
    Semantics,
    Stage,
    StageKind,
    Template,
    TemplateError,
    Window,
    placeholders,
)
from services.gateway.templates.parse import parse_template
from services.gateway.templates.registry import (
    MAX_TEMPLATE_BYTES,
    MAX_TEMPLATE_DEPTH,
    MAX_TEMPLATE_NODES,
    WORKFLOWS_DIR,
    TemplateRegistry,
    builtin_names,
    load_builtin,
    load_template,
    parse_template_yaml,
)

__all__ = [
    "MAX_TEMPLATE_BYTES", "MAX_TEMPLATE_DEPTH", "MAX_TEMPLATE_NODES", "PLACEHOLDER",
    "WORKFLOWS_DIR", "Binding", "CandidateSpace", "ChainStep", "DecisionPoint",
    "PlaceholderSource", "Scalar", "Semantics", "Stage", "StageKind", "Template",
    "TemplateError", "TemplateRegistry", "Window", "builtin_names", "load_builtin",
    "load_template", "parse_template", "parse_template_yaml", "placeholders",
]
