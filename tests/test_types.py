"""mypy, strict, over services/ (``[tool.mypy]`` in pyproject.toml names the scope and its
exclusions), as part of the test command; and the service faces seen through: each face's
``if TYPE_CHECKING:`` imports are exactly its lazy table (and so its ``__all__``), and a call of
the wrong type through any face is a mypy error (one mypy run checks the scope and the planted
calls together)."""

from __future__ import annotations

import ast
import importlib
import os
import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

import pytest
from mypy import api

ROOT = Path(__file__).resolve().parents[1]
FACES = sorted(p.parent.name for p in (ROOT / "services").glob("*/__init__.py")
               if "lazy_face(" in p.read_text())

#: The planted module (mypy may name it by an earlier run's path: it is known by this name).
PLANT = "plant_faces.py"
#: Per face: a name it exports and a call of it with an argument of the wrong type. Were the
#: face's names ``Any`` to mypy again (a lazy ``__getattr__`` only), each would type-check.
PLANTS = {
    "admission": ("proposal", 'proposal("c", "first", 0.5, {})'),
    "corpus": ("Document", 'Document(1, "title", "text")'),
    "csl": ("LibraryOptions", 'LibraryOptions(budget_bytes="big")'),
    "delivery": ("make_policy", "make_policy(3)"),
    "engine_agent": ("scaled_headroom", 'scaled_headroom("many")'),
    "gateway": ("tagged", "tagged(workflow_type=7)"),
}


def plant_source() -> str:
    imports = [f"from services.{face} import {name}" for face, (name, _) in PLANTS.items()]
    return "\n".join([*imports, *(call for _, call in PLANTS.values())]) + "\n"


@pytest.fixture(scope="module")
def mypy_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, int]]:
    """mypy over pyproject's scope and the planted calls: its report and its status."""
    plant = tmp_path_factory.mktemp("plant") / PLANT
    plant.write_text(plant_source())
    files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]["files"]
    cwd = Path.cwd()
    os.chdir(ROOT)  # mypy reads its settings and exclusions from pyproject.toml here
    try:
        out, err, status = api.run([*files, str(plant)])
    finally:
        os.chdir(cwd)
    yield out + err, status


def _errors(out: str) -> tuple[dict[int, list[str]], list[str]]:
    """mypy's errors: the plant's by line, and the others. The plant is known by its file name:
    mypy may name it by the path it was cached under in an earlier run."""
    planted: dict[int, list[str]] = {}
    others = []
    for line in out.splitlines():
        where, sep, message = line.partition(": error: ")
        if not sep:
            continue
        path, _, number = where.rpartition(":")
        if Path(path).name == PLANT:
            planted.setdefault(int(number), []).append(message)
        else:
            others.append(line)
    return planted, others


def test_the_services_type_check_strictly(mypy_run: tuple[str, int]) -> None:
    out, _ = mypy_run
    assert _errors(out)[1] == [], out
    checked = re.search(r"(\d+) source files\)?$", out.strip())
    assert checked and int(checked[1]) > 90, out  # the scope did not silently shrink


def test_a_wrong_type_call_through_every_face_is_an_error(mypy_run: tuple[str, int]) -> None:
    out, status = mypy_run
    assert status == 1, out
    planted = _errors(out)[0]
    first = len(PLANTS) + 1  # the calls follow the imports, one a line
    for line, face in enumerate(PLANTS, start=first):
        assert any(m.endswith("[arg-type]") for m in planted.get(line, [])), (face, out)
    assert sorted(PLANTS) == FACES  # a plant for every face


def _type_checking_imports(tree: ast.Module) -> dict[str, str]:
    """``if TYPE_CHECKING:`` imports at the top of a face: name → its module, each re-exported
    (``import X as X``, which mypy strict needs to count it as the face's)."""
    found: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", "") == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom) and imp.module, ast.dump(imp)
                for alias in imp.names:
                    assert alias.asname == alias.name, f"{alias.name}: import it as itself"
                    found[alias.name] = imp.module
    return found


def _lazy_table(tree: ast.Module, package: str) -> dict[str, str]:
    """The face's ``lazy_face(__name__, {name: submodule})`` table: name → its module."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", "") == "lazy_face":
            table = node.args[1]
            assert isinstance(table, ast.Dict)
            return {ast.literal_eval(k): f"{package}.{ast.literal_eval(v)}"
                    for k, v in zip(table.keys, table.values, strict=True) if k is not None}
    return {}


@pytest.mark.parametrize("face", FACES)
def test_every_face_name_is_typed_from_the_module_its_table_names(face: str) -> None:
    package = f"services.{face}"
    tree = ast.parse((ROOT / "services" / face / "__init__.py").read_text())
    static = _type_checking_imports(tree)
    table = _lazy_table(tree, package)
    assert table, face
    assert static == table
    assert sorted(static) == importlib.import_module(package).__all__
