"""The documentation against the code: the README stays short, documents every command and every
option of the command line, and the docs' relative links resolve.

Options are taken from the click group itself (``gemmtune.cli.cli``), so a new command or option
fails here until the README's section for that command mentions it.
"""

from __future__ import annotations

import re
from pathlib import Path

import click
import pytest

from gemmtune.cli import cli

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
MAX_README_BYTES = 25_000
DOCS = [README, *sorted((REPO / "docs").glob("*.md"))]


def readme() -> str:
    return README.read_text(encoding="utf-8")


def command_section(text: str, name: str) -> str | None:
    """The README's section for ``gemmtune NAME``: from its heading to the next heading of the
    same or a higher level."""
    m = re.search(rf"^(#+) `gemmtune {re.escape(name)}`[^\n]*\n", text, re.MULTILINE)
    if m is None:
        return None
    level = len(m.group(1))
    end = re.search(rf"^#{{1,{level}}} ", text[m.end():], re.MULTILINE)
    return text[m.end(): m.end() + end.start()] if end else text[m.end():]


def mentions(text: str, opt: str) -> bool:
    """Whether ``opt`` (``--device``, ``-p``) appears as an option, not inside a longer one
    (``--m`` is not found in ``--model``)."""
    return re.search(rf"(?<![\w-]){re.escape(opt)}(?![\w-])", text) is not None


def test_readme_is_short():
    size = README.stat().st_size
    assert size <= MAX_README_BYTES, (
        f"README.md is {size:,} bytes, over {MAX_README_BYTES:,}: move depth to docs/ and link it")


def test_every_command_has_a_readme_section():
    text = readme()
    missing = [name for name in cli.commands if command_section(text, name) is None]
    assert not missing, ("README.md has no section headed `gemmtune NAME` for: "
                         + ", ".join(f"gemmtune {name}" for name in missing))


def test_every_option_is_in_its_commands_readme_section():
    text = readme()
    missing = []
    for name, command in sorted(cli.commands.items()):
        section = command_section(text, name)
        if section is None:
            continue  # reported by test_every_command_has_a_readme_section
        for param in command.params:
            if isinstance(param, click.Option):
                missing += [f"gemmtune {name} {opt}" for opt in param.opts if not mentions(section, opt)]
    assert not missing, "options not documented in their command's README section:\n  " + "\n  ".join(missing)


def test_group_options_are_in_the_readme():
    text = readme()
    missing = [opt for param in cli.params if isinstance(param, click.Option) for opt in param.opts
               if not mentions(text, opt)]
    assert not missing, "gemmtune's own options missing from README.md: " + ", ".join(missing)


LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)")


def prose(path: Path) -> str:
    """A Markdown file without its code blocks."""
    return re.sub(r"```.*?```", "", path.read_text(encoding="utf-8"), flags=re.DOTALL)


def relative_links(path: Path) -> list[str]:
    return [t for t in LINK.findall(prose(path)) if not re.match(r"[a-z][a-z0-9+.-]*:|#", t)]


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(doc):
    broken = [t for t in relative_links(doc) if not (doc.parent / t.split("#")[0]).exists()]
    assert not broken, f"{doc.relative_to(REPO)} links to missing files: " + ", ".join(broken)


def headings(path: Path) -> list[str]:
    """The headings of a Markdown file, as text (inline code's backticks dropped)."""
    return [h.replace("`", "") for h in re.findall(r"^#+ +(.+?) *#*$", prose(path), re.MULTILINE)]


def anchors(path: Path) -> set[str]:
    """The anchors GitHub gives the headings of a Markdown file: lower case, punctuation dropped,
    spaces as hyphens, a repeated one numbered (-1, -2, ...)."""
    slugs, count = set(), {}
    for heading in headings(path):
        heading = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)   # a link's text
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        n = count[slug] = count.get(slug, -1) + 1
        slugs.add(slug if n == 0 else f"{slug}-{n}")
    return slugs


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(REPO)))
def test_links_to_sections_resolve(doc):
    """A link to a section (``file.md#anchor`` or ``#anchor``) names a heading that exists: a
    renamed or removed section fails here, where the file check above would pass."""
    broken = []
    for target in LINK.findall(prose(doc)):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or "#" not in target:
            continue
        file, anchor = target.split("#", 1)
        path = (doc.parent / file) if file else doc
        if path.suffix == ".md" and path.exists() and anchor not in anchors(path):
            broken.append(target)
    assert not broken, f"{doc.relative_to(REPO)} links to sections that do not exist: " + ", ".join(broken)


# A section named in the code: docs/search.md, "The search pipeline" (a comment may wrap it).
SECTION = re.compile(r'(docs/[\w-]+\.md), +"([^"]+)"')
CODE = [*sorted((REPO / "gemmtune").rglob("*.py")), *sorted((REPO / "tools").glob("*.py")),
        *sorted((REPO / "kernels").glob("*.cl")), *sorted((REPO / "docs" / "landscapes").glob("*.toml"))]


def test_sections_the_code_names_exist():
    """Comments and docstrings that point to a section of the docs by its title (or the start of
    it) point to one that exists."""
    missing, found = [], 0
    for path in CODE:
        for doc, title in SECTION.findall(path.read_text(encoding="utf-8")):
            title = re.sub(r"\s+(?:(?://|#)\s*)?", " ", title).strip().rstrip(".,")
            found += 1
            if not any(h.startswith(title) for h in headings(REPO / doc)):
                missing.append(f"{path.relative_to(REPO)}: {doc}, {title!r}")
    assert found, "no section references found: the pattern no longer matches the code's"
    assert not missing, "sections named in the code that the docs do not have:\n  " + "\n  ".join(missing)


@pytest.mark.parametrize("path", sorted((REPO / "docs" / "landscapes").glob("*.toml")), ids=lambda p: p.name)
def test_landscape_spaces_the_docs_name_load_and_are_named_there(path):
    """The spaces the performance docs' landscape commands pass to --space: each parses as a
    search space of the shipped families (a renamed parameter fails here) and is named in the
    docs, so the commands stay true."""
    from gemmtune.space import load_space

    space = load_space(path)
    assert [f.family.name for f in space.families] and all(f.values for f in space.families)
    assert f"docs/landscapes/{path.name}" in (REPO / "docs" / "search.md").read_text(encoding="utf-8")
