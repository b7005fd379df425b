"""The documentation site's structure, without mkdocs (``make docs`` builds it, strict): every page under docs/ is
in mkdocs.yml's ``nav`` and every ``nav`` entry exists; README.md stays a quickstart (at most 250 lines) whose
tables are the site's (each README table row is on a docs page, its links made relative to docs/) and whose links
resolve, anchors included (GitHub's anchors, which the site uses too: mkdocs_hooks.gfm_slug)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

from mkdocs_hooks import gfm_slug

REPO = Path(__file__).resolve().parents[1]
DOCS = REPO / "docs"
README_MAX_LINES = 250


def nav_pages(nav) -> list[str]:
    """Every page path of a mkdocs ``nav`` (entries are ``page.md``, ``{title: page.md}`` or ``{title: [...]}``)."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    raise AssertionError(f"unexpected nav entry {nav!r}")


def test_nav_holds_every_page_once_and_only_pages_that_exist():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["docs_dir"] == "docs" and config["strict"] is True
    pages = nav_pages(config["nav"])
    on_disk = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md"))
    assert len(pages) == len(set(pages)), f"pages listed twice in mkdocs.yml's nav: {pages}"
    assert sorted(pages) == on_disk, (
        f"not in mkdocs.yml's nav: {sorted(set(on_disk) - set(pages))}; "
        f"in the nav but missing from docs/: {sorted(set(pages) - set(on_disk))}"
    )
    assert pages[0] == "index.md"
    for hook in config.get("hooks", []):
        assert (REPO / hook).is_file(), hook


def test_readme_is_a_quickstart():
    lines = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    assert len(lines) <= README_MAX_LINES, (
        f"README.md has {len(lines)} lines (at most {README_MAX_LINES}): move text to docs/"
    )
    text = "\n".join(lines)
    assert "```bash\nmake demo " in text and "\nmake test " in text, "README.md lost its two set-up commands"


def _as_docs_page(line: str) -> str:
    """A README line as it reads on a docs page: ``[docs/x.md](docs/x.md#a)`` -> ``[x.md](x.md#a)``."""
    return line.replace("[docs/", "[").replace("](docs/", "](")


def test_readme_tables_are_the_sites():
    readme_rows = [ln for ln in (REPO / "README.md").read_text(encoding="utf-8").splitlines() if ln.startswith("| ")]
    assert len(readme_rows) > 30, "README.md lost its feature, demo or recipe table"
    docs_lines = {ln for p in DOCS.rglob("*.md") for ln in p.read_text(encoding="utf-8").splitlines()}
    missing = [row for row in readme_rows if _as_docs_page(row) not in docs_lines]
    assert not missing, "README.md table rows that no docs page holds (copy the change to the page):\n" + "\n".join(
        missing
    )


def _anchors(path: Path) -> set[str]:
    """GitHub's anchors of a markdown file's headings (fenced code skipped)."""
    anchors, fenced = set(), False
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        elif not fenced and (m := re.match(r"#{1,6} (.+)", line)):
            title = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", m.group(1)).replace("`", "")
            anchors.add(gfm_slug(title))
    return anchors


def test_readme_links_resolve():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert links
    broken = []
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue
        path, _, anchor = link.partition("#")
        target = REPO / path if path else REPO / "README.md"
        if not target.exists() or (anchor and anchor not in _anchors(target)):
            broken.append(link)
    assert not broken, f"README.md links that do not resolve: {broken}"


def test_gfm_slug_is_githubs():
    assert gfm_slug("Tensor-parallel engines (tp > 1)") == "tensor-parallel-engines-tp--1"
    assert gfm_slug("ckpt/<exp>/") == "ckptexp"
    assert (
        gfm_slug("8. Rollout-policy correction: rollout_correction") == "8-rollout-policy-correction-rollout_correction"
    )
    assert (
        gfm_slug("vLLM's sleep rules, and how CPU runs enforce them")
        == "vllms-sleep-rules-and-how-cpu-runs-enforce-them"
    )
