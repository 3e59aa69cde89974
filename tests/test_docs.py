"""Every code block of ``README.md`` and ``docs/*.md`` is run, or, where it cannot run inside the
suite, checked line by line, so that none rots (issue 39, item 6).

- The README's ``dynbranch up`` block starts the mesh every other block talks to (module-scoped),
  on free ports in place of the 8000 and 50051 the blocks name (substituted in every block).
- ``bash`` blocks run with ``bash -e``, ``python`` blocks as scripts, from the repository root,
  with the venv's ``bin/`` first on ``PATH`` and ``DYNBRANCH_BASE_URL`` set. A ``text`` block
  marked ``<!-- output -->`` must match what the block before it printed (``...``: any text).
- ``json`` and ``yaml`` blocks are parsed; other ``text`` blocks (diagrams) are left alone; any
  other language, or none, fails.
- A block preceded by ``<!-- not run: REASON -->`` or ``<!-- run by TEST: REASON -->`` is not run
  here: it must give its reason, such blocks must stay few, a named test must exist and name the
  page, and every command line of a ``bash`` one is checked: ``dynbranch`` lines by dynbranch's
  own argument parser (a wrong flag fails), the scripts with their ``--help`` and arguments, and
  the overlays, modules, markers and paths they name.
- The README stays short and starts with the user; every relative link and anchor resolves.
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import os
import re
import shlex
import subprocess
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.test_cli import printed, up_lines
from tests.test_up import _free_ports

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: The ports the blocks name, as a user starts the mesh (README: ``dynbranch up --grpc-port
#: 50051 --http-port 8000``); the test substitutes free ones.
USER_HTTP, USER_GRPC = 8000, 50051
LANGUAGES = {"bash", "python", "text", "json", "yaml"}
#: Blocks that are not run here (``not run`` and ``run by``) stay few.
MAX_UNRUN = 8
README_MAX_LINES = 200
FENCE = re.compile(r"^```(\S*)\s*$")
NOTE = re.compile(r"^<!--\s*(not run|run by (\S+?)|output)\s*(?::\s*(.*?))?\s*-->$")


@dataclass(frozen=True, slots=True)
class Block:
    """One fenced block: where it is, its language and text, and the note before it."""

    page: Path
    line: int
    lang: str
    text: str
    note: str = ""  # "", "not run", "run by", "output"
    reason: str = ""
    runner: str = ""  # the test a "run by" block names

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"

    @property
    def runs_here(self) -> bool:
        return self.lang in ("bash", "python") and not self.note and not self.is_server

    @property
    def is_server(self) -> bool:
        return self.lang == "bash" and not self.note and any(
            line.startswith("dynbranch up") for line in self.text.splitlines())


def parse(page: Path) -> list[Block]:
    """The fenced blocks of a page, each with the HTML comment just before it, if any."""
    blocks, lines = [], page.read_text().splitlines()
    i, before = 0, ""
    while i < len(lines):
        fence = FENCE.match(lines[i])
        if not fence:
            if lines[i].strip():
                before = lines[i].strip()
            i += 1
            continue
        end = next((j for j in range(i + 1, len(lines)) if lines[j].startswith("```")), None)
        assert end is not None, f"{page.relative_to(ROOT)}:{i + 1}: unclosed block"
        kind = reason = runner = ""
        if note := NOTE.match(before):
            kind = "run by" if note.group(1).startswith("run by") else note.group(1)
            reason, runner = note.group(3) or "", note.group(2) or ""
        text = "\n".join(lines[i + 1:end]) + "\n"
        blocks.append(Block(page, i + 1, fence.group(1), text, kind, reason, runner))
        before, i = "", end + 1
    return blocks


BLOCKS = [block for page in PAGES for block in parse(page)]


def ids(blocks: list[Block]) -> list[str]:
    return [f"{b.where}-{b.lang}" for b in blocks]


# -- the mesh the blocks talk to ---------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Mesh:
    http_port: int
    grpc_port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.http_port}/v1"

    def substitute(self, text: str) -> str:
        """A block as run here: the user's ports replaced by this mesh's."""
        for user, port, flag in ((USER_HTTP, self.http_port, "--http-port"),
                                 (USER_GRPC, self.grpc_port, "--grpc-port")):
            text = text.replace(f"127.0.0.1:{user}", f"127.0.0.1:{port}")
            text = text.replace(f"{flag} {user}", f"{flag} {port}")
        return text

    def env(self) -> dict[str, str]:
        bin_dir = str(Path(sys.executable).parent)
        return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}",
                "DYNBRANCH_BASE_URL": self.base_url}


def server_block() -> Block:
    (block,) = [b for b in BLOCKS if b.is_server]
    return block


@pytest.fixture(scope="module")
def mesh(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Mesh]:
    """The README's ``dynbranch up`` block, run as written but for its ports."""
    block = server_block()
    http_port, grpc_port = _free_ports(2)
    here = Mesh(http_port, grpc_port)
    up_args: list[str] | None = None
    for line in here.substitute(block.text).splitlines():
        words = shlex.split(line, comments=True)
        if words[:1] == ["source"]:  # the venv: the one this test runs in, if not the default
            assert (ROOT / words[1]).is_file() or Path(sys.prefix) != ROOT / ".venv", line
        elif words[:2] == ["dynbranch", "up"]:
            up_args = words[2:]
        elif words:
            raise AssertionError(f"{block.where}: the mesh block runs only `dynbranch up`: {line}")
    assert up_args is not None
    with up_lines(up_args, tmp_path_factory.mktemp("docs-up")) as lines:
        assert printed(lines, r"openai-compatible API: (\S+/v1)") == here.base_url
        assert printed(lines, r"^\s*gateway\s+grpc (\S+)") == f"127.0.0.1:{grpc_port}"
        yield here


# -- blocks that run ---------------------------------------------------------------------------


def run(block: Block, mesh: Mesh, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    text = mesh.substitute(block.text)
    if block.lang == "python":
        script = tmp_path / "block.py"
        script.write_text(text)
        argv = [sys.executable, str(script)]
    else:
        argv = ["bash", "-e", "-c", text]
    return subprocess.run(argv, cwd=ROOT, env=mesh.env(), capture_output=True, text=True,
                          timeout=120)


def output_after(block: Block) -> Block | None:
    index = BLOCKS.index(block)
    following = BLOCKS[index + 1] if index + 1 < len(BLOCKS) else None
    if following is not None and following.page == block.page and following.note == "output":
        return following
    return None


def matches(expected: str, printed_text: str) -> bool:
    """Each line of ``expected`` matches a line printed, in order; ``...`` is any text and runs
    of spaces are one."""
    def norm(line: str) -> str:
        return " ".join(line.split())

    got = [norm(line) for line in printed_text.splitlines()]
    at = 0
    for want in (norm(line) for line in expected.splitlines() if line.strip()):
        pattern = re.compile(".*".join(re.escape(part) for part in want.split("...")))
        while at < len(got) and not pattern.fullmatch(got[at]):
            at += 1
        if at == len(got):
            return False
        at += 1
    return True


@pytest.mark.slow
@pytest.mark.parametrize("block", [b for b in BLOCKS if b.runs_here],
                         ids=ids([b for b in BLOCKS if b.runs_here]))
def test_block_runs(block: Block, mesh: Mesh, tmp_path: Path) -> None:
    done = run(block, mesh, tmp_path)
    assert done.returncode == 0, f"{block.where} failed:\n{done.stdout}\n{done.stderr}"
    expected = output_after(block)
    if expected is not None:
        assert matches(expected.text, done.stdout), \
            f"{expected.where}: the output shown is not what {block.where} printed:\n{done.stdout}"


# -- blocks that are read ----------------------------------------------------------------------


def test_every_block_has_a_language_this_test_knows() -> None:
    unknown = [f"{b.where} ```{b.lang}" for b in BLOCKS if b.lang not in LANGUAGES]
    assert not unknown, f"tag each block with one of {sorted(LANGUAGES)}: {unknown}"


def test_data_blocks_parse() -> None:
    import json

    for block in BLOCKS:
        try:
            if block.lang == "json":
                json.loads(block.text)
            elif block.lang == "yaml":
                list(yaml.safe_load_all(block.text))
        except (ValueError, yaml.YAMLError) as error:
            raise AssertionError(f"{block.where}: {error}") from error


def test_output_blocks_follow_a_block_that_runs() -> None:
    for block in (b for b in BLOCKS if b.note == "output"):
        assert block.lang == "text", block.where
        index = BLOCKS.index(block)
        assert index and BLOCKS[index - 1].page == block.page and BLOCKS[index - 1].runs_here, \
            f"{block.where}: an output block must follow a block this test runs"


def test_the_mesh_block_is_the_readmes_one() -> None:
    block = server_block()
    assert block.page.name == "README.md" and f"--http-port {USER_HTTP}" in block.text \
        and f"--grpc-port {USER_GRPC}" in block.text


# -- blocks that are not run here: the reason, and what can be checked --------------------------


UNRUN = [b for b in BLOCKS if b.note in ("not run", "run by")]


def test_unrun_blocks_are_few_and_each_says_why() -> None:
    assert len(UNRUN) <= MAX_UNRUN, f"{len(UNRUN)} blocks not run: {ids(UNRUN)}"
    for block in UNRUN:
        assert len(block.reason.split()) >= 4, f"{block.where}: say why it is not run"


@pytest.mark.parametrize("block", [b for b in UNRUN if b.note == "run by"],
                         ids=ids([b for b in UNRUN if b.note == "run by"]))
def test_the_test_that_runs_a_block_exists_and_names_its_page(block: Block) -> None:
    runner = ROOT / block.runner
    assert runner.is_file() and runner.name.startswith("test_"), f"{block.where}: {runner}"
    assert str(block.page.relative_to(ROOT)) in runner.read_text(), \
        f"{block.runner} does not name {block.page.relative_to(ROOT)}, so it cannot run its block"


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _markers() -> set[str]:
    return {m.split(":")[0] for m in _pyproject()["tool"]["pytest"]["ini_options"]["markers"]}


def _check_pytest_args(args: list[str], where: str) -> None:
    """Marker expressions name declared markers; paths exist."""
    for i, arg in enumerate(args):
        if args[i - 1:i] == ["-m"]:
            names = set(re.findall(r"\w+", arg)) - {"and", "or", "not"}
            assert names <= _markers(), f"{where}: undeclared marker in -m {arg!r}"
        elif not arg.startswith("-") and args[i - 1:i] != ["-k"]:
            assert (ROOT / arg.split("::")[0]).exists(), f"{where}: no {arg}"


@functools.cache
def _help(script: str) -> str:
    done = subprocess.run(["bash", f"scripts/{script}", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"usage: bash scripts/{script}"), done.stdout[:200]
    return done.stdout


def _k8s_service_ports(name: str) -> set[int]:
    for path in (ROOT / "k8s" / "base").rglob("*.yaml"):
        for doc in yaml.safe_load_all(path.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "Service" \
                    and doc["metadata"]["name"] == name:
                return {port["port"] for port in doc["spec"]["ports"]}
    return set()


def check_line(words: list[str], where: str) -> None:
    """What can be checked of one command line without running it; an unknown command fails."""
    from services.cli import build_parser

    env = []
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", words[0]):
        env.append(words.pop(0).split("=")[0])
    if not words or words[0] == "export":
        return
    if words[0] == "dynbranch":
        try:
            build_parser().parse_args(words[1:])
        except SystemExit as stop:
            assert stop.code == 0, f"{where}: dynbranch refuses {shlex.join(words[1:])}"
    elif words[:2] == ["bash", "scripts/demo.sh"]:
        assert "usage: dynbranch report" in _help("demo.sh")
        check_line(["dynbranch", "report", *words[2:]], where)
    elif words[:2] == ["bash", "scripts/test.sh"]:
        usage = _help("test.sh")
        assert all(name in usage for name in env), f"{where}: test.sh names none of {env}"
        _check_pytest_args(words[2:], where)
    elif words[:2] == ["bash", "scripts/setup.sh"]:
        extras = _pyproject()["project"]["optional-dependencies"]
        assert all(extra in extras for extra in words[2:]), f"{where}: no such extra"
    elif words[:3] == ["docker", "build", "-t"]:
        assert (ROOT / words[-1] / "Dockerfile").is_file(), where
    elif words[:1] == ["kubectl"] and "port-forward" in words:
        service = words[words.index("port-forward") + 1].removeprefix("svc/")
        ports = {int(p.split(":")[0]) for p in words[words.index("port-forward") + 2:]}
        assert ports and ports <= _k8s_service_ports(service), f"{where}: {service} {ports}"
    elif words[:1] == ["kubectl"] and ("-k" in words or "kustomize" in words):
        assert (ROOT / words[-1] / "kustomization.yaml").is_file(), f"{where}: {words[-1]}"
    elif Path(words[0]).name.startswith("python") and words[1:2] == ["-m"]:
        assert importlib.util.find_spec(words[2]) is not None, f"{where}: no module {words[2]}"
        if words[2] == "pytest":
            _check_pytest_args(words[3:], where)
    elif Path(words[0]).name.startswith("python"):
        assert (ROOT / words[1]).is_file(), f"{where}: no {words[1]}"
    else:
        raise AssertionError(f"{where}: no check for `{shlex.join(words)}`: run the block, or "
                             "teach tests/test_docs.py what to check of it")


@pytest.mark.parametrize("block", UNRUN, ids=ids(UNRUN))
def test_unrun_block_is_checked(block: Block) -> None:
    if block.lang == "python":
        ast.parse(block.text)
        return
    assert block.lang == "bash", f"{block.where}: only bash and python blocks may skip running"
    for offset, line in enumerate(block.text.splitlines(), start=1):
        words = shlex.split(line, comments=True)
        check_line(words, f"{block.where}+{offset}")


def test_a_wrong_flag_fails_the_check() -> None:
    """The checks bite: a renamed flag in a block that is not run fails it."""
    with pytest.raises(AssertionError, match="dynbranch refuses"):
        check_line(["dynbranch", "report", "--fulll"], "planted")
    with pytest.raises(AssertionError, match="dynbranch refuses"):
        check_line(["bash", "scripts/demo.sh", "--quick"], "planted")
    with pytest.raises(AssertionError, match="undeclared marker"):
        check_line(["bash", "scripts/test.sh", "-m", "not slowly"], "planted")
    with pytest.raises(AssertionError, match="no check for"):
        check_line(["make", "docs"], "planted")


def test_matching_an_output_block() -> None:
    assert matches("router  engine  picked [...]\nhandler ...", "x\nrouter engine picked ['a']\n"
                   "handler promoted_fill  for a\n")
    assert not matches("handler promoted_fill", "handler engine for a\n")


# -- the pages ---------------------------------------------------------------------------------


def slug(heading: str) -> str:
    """GitHub's anchor of a heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(page: Path) -> set[str]:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    return {slug(m.group(1)) for m in re.finditer(r"^#+ (.*)$", text, re.M)}


def test_the_readme_starts_with_the_user() -> None:
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES
    first_screen = "\n".join(lines[:40])
    for command in ("bash scripts/demo.sh", "bash scripts/test.sh", "dynbranch up"):
        assert command in first_screen, command
    assert "bash scripts/test.sh" in (ROOT / ".ci" / "run").read_text()
    for page in PAGES[1:]:
        assert f"(docs/{page.name})" in "\n".join(lines), f"README links no docs/{page.name}"


@pytest.mark.parametrize("page", PAGES, ids=[p.name for p in PAGES])
def test_links_and_anchors_resolve(page: Path) -> None:
    text = re.sub(r"^```.*?^```", "", page.read_text(), flags=re.S | re.M)
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"\w+://", target):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        assert linked.exists(), f"{page.name}: {target}"
        if anchor:
            assert anchor in anchors(linked), f"{page.name}: no anchor #{anchor} in {linked.name}"
