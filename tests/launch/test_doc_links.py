# tests/launch/test_doc_links.py owns the check that the documentation's doors open: every
# relative link of README.md, docs/*.md and the folder READMEs names a file or directory of the
# checkout, and every `#anchor` into a markdown page names one of its headings (GitHub's slugs);
# and every `docs/design.md "Section"` that a source comment cites on one line names a section of
# docs/design.md (a heading, or the bold lead term of a bullet); and that design.md "Layout" has a
# line for every folder of src/ and tests/ that git tracks. Links inside code (fenced blocks,
# `inline code`) and to other sites are not checked. Standard library and pytest only.
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(os.environ.get("VTRAIN_ROOT", Path(__file__).resolve().parents[2]))
PAGES = sorted({ROOT / "README.md", *(ROOT / "docs").glob("*.md"),
                *(p for p in (ROOT / "launch/README.md", ROOT / "bench/README.md",
                              ROOT / "cuda_emu/README.md", ROOT / "tests/reference/FORMAT.md")
                  if p.exists())})
LINK = re.compile(r"(?<!\!)\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^()\s]+)(?:\s+\"[^\"]*\")?\)")
IMAGE = re.compile(r"!\[[^\]]*\]\(([^()\s]+)\)")


def prose(text):
    """The text outside fenced code blocks and inline code (kept line for line)."""
    out, fenced = [], False
    for line in text.splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            out.append("")
            continue
        out.append("" if fenced else re.sub(r"`[^`]*`", "``", line))
    return out


def slug(heading):
    """GitHub's anchor for a heading: lower case, punctuation but - and _ dropped, spaces -> -."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(page):
    """The anchors of a page's headings (inline code keeps its text, as on GitHub)."""
    seen, out, fenced = {}, set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
        m = None if fenced else re.match(r"(#{1,6})\s+(.*?)\s*#*\s*$", line)
        if m:
            base = slug(m.group(2).replace("`", ""))
            n = seen.get(base, 0)
            seen[base] = n + 1
            out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page):
    for no, line in enumerate(prose(page.read_text()), 1):
        for rx in (LINK, IMAGE):
            for m in rx.finditer(line):
                target = m.group(1)
                if re.match(r"[a-z][a-z0-9+.-]*:", target):  # http:, https:, mailto:
                    continue
                yield no, target


def broken(page):
    bad = []
    for no, target in links(page):
        path, _, frag = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        where = f"{page.relative_to(ROOT)}:{no}: {target}"
        if not dest.exists():
            bad.append(f"{where}: no such file")
        elif ROOT.resolve() not in (dest, *dest.parents):
            bad.append(f"{where}: outside the checkout")
        elif frag and dest.suffix == ".md" and frag not in anchors(dest):
            bad.append(f"{where}: no heading with anchor #{frag} in {dest.relative_to(ROOT)}")
    return bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(page):
    assert broken(page) == []


def test_the_pages_link_each_other():
    # The front door links every page of docs/ (a page nobody links is a page nobody reads).
    readme = {t.partition("#")[0] for _, t in links(ROOT / "README.md")}
    for page in sorted((ROOT / "docs").glob("*.md")):
        assert f"docs/{page.name}" in readme, f"README.md does not link docs/{page.name}"


def test_the_checker_sees_a_broken_link(tmp_path, monkeypatch):
    # The checker itself: a missing file, a missing anchor and a link in code (ignored).
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "a.md").write_text("# Title `code`\n\n## Two words\n")
    page = tmp_path / "b.md"
    page.write_text("[x](a.md#two-words) [y](a.md#title-code) [z](missing.md) [w](a.md#nope)\n"
                    "`[v](missing2.md)`\n```\n[u](missing3.md)\n```\n[t](https://example.com)\n")
    bad = broken(page)
    assert len(bad) == 2, bad
    assert "missing.md: no such file" in bad[0] and "#nope" in bad[1]


DESIGN_CITE = re.compile(r"docs/design\.md,? \"([^\"]+)\"(?: and \"([^\"]+)\")?")


def design_sections():
    text = (ROOT / "docs/design.md").read_text()
    heads = [m.group(1).replace("`", "") for m in re.finditer(r"^#{2,4}\s+(.*)$", text, re.M)]
    bold = re.findall(r"^\s*- \*\*([^*]+)\*\*", text, re.M)
    return heads, bold


def test_design_citations_in_comments_name_a_section():
    heads, bold = design_sections()
    bad = []
    for folder in ("src", "kernels", "tools", "tests", "scripts", "launch", "bench", "cuda_emu"):
        for path in sorted((ROOT / folder).rglob("*")):
            if path.suffix not in (".h", ".cc", ".cu", ".cuh", ".py", ".sh") or not path.is_file():
                continue
            for no, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                for m in DESIGN_CITE.finditer(line):
                    for name in filter(None, m.groups()):
                        if name == "Section":  # the page's own example of the citation form
                            continue
                        if not any(h.startswith(name) for h in heads) and \
                                not any(b.rstrip(".").startswith(name) for b in bold):
                            bad.append(f"{path.relative_to(ROOT)}:{no}: \"{name}\"")
    assert bad == [], "cited sections missing from docs/design.md:\n" + "\n".join(bad)


def test_layout_names_every_source_and_test_folder():
    # docs/design.md "Layout" is the one place the layout is written: every folder of src/ and
    # tests/ (and src/model's values/ and blocks/) must have its line there, so it cannot drift.
    text = (ROOT / "docs/design.md").read_text()
    layout = text[text.index("## Layout"):text.index("\n## ", text.index("## Layout") + 3)]
    try:  # the folders git tracks (a checkout may hold untracked work in progress)
        files = subprocess.run(["git", "-C", str(ROOT), "ls-files", "src", "tests"], check=True,
                               capture_output=True, text=True, timeout=600).stdout.split()
        folders = sorted({"/".join(f.split("/")[:2]) + "/" for f in files if f.count("/") >= 2})
    except (OSError, subprocess.SubprocessError):  # no git: the folders on disk
        folders = [f"{top}/{d.name}/" for top in ("src", "tests")
                   for d in sorted((ROOT / top).iterdir())
                   if d.is_dir() and not d.name.startswith((".", "__"))]
    missing = [f for f in folders if f"`{f}`" not in layout]
    missing += [f"src/model/{d}/" for d in ("values", "blocks")
                if (ROOT / "src/model" / d).is_dir() and f"`{d}/`" not in layout]
    assert missing == [], ("folders without a line in docs/design.md \"Layout\": "
                           + ", ".join(missing))
