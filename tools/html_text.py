#!/usr/bin/env python3
# tools/html_text.py owns turning a tree of HTML pages into one plain-text corpus for
# `vtrain prepare` (the second ablation corpus, scripts/corpus_pydoc.sh): the visible text of each
# page's main content, scripts, styles and navigation left out, one blank line between blocks,
# pages in sorted path order so the corpus is the same on every run. Standard library only.
"""Print the visible text of every *.html under DIR (sorted), or of the files given.

    python tools/html_text.py DIR > corpus.txt
"""
from __future__ import annotations

import html.parser
import sys
from pathlib import Path

SKIP = {"script", "style", "nav", "head", "footer"}
BLOCK = {"p", "div", "section", "li", "dt", "dd", "pre", "h1", "h2", "h3", "h4", "h5", "h6",
         "tr", "table", "blockquote", "br", "ul", "ol", "dl"}
# Sphinx pages (the Python documentation): navigation bars and sidebars are divs of these classes.
SKIP_CLASSES = {"related", "sphinxsidebar", "footer", "headerlink", "navigation"}


class _Text(html.parser.HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.out: list[str] = []
        self.stack: list[bool] = []  # per open element: does it hide its content?
        self.hidden = 0
        self.pre = 0  # inside <pre>: line breaks are the text's own

    def handle_starttag(self, tag, attrs):
        classes = set((dict(attrs).get("class") or "").split())
        hide = tag in SKIP or bool(classes & SKIP_CLASSES)
        if tag in ("br", "img", "hr", "meta", "link", "input"):  # void elements: no end tag
            if tag == "br" and not self.hidden:
                self.out.append("\n")
            return
        self.stack.append(hide)
        self.hidden += hide
        self.pre += tag == "pre"
        if tag in BLOCK and not self.hidden:
            self.out.append("\n")

    def handle_startendtag(self, tag, attrs):  # <br/>, <meta .../>: nothing opens or closes
        if tag == "br" and not self.hidden:
            self.out.append("\n")

    def handle_endtag(self, tag):
        if not self.stack:
            return
        self.hidden -= self.stack.pop()
        self.pre -= tag == "pre" and self.pre > 0
        if tag in BLOCK and not self.hidden:
            self.out.append("\n")

    def handle_data(self, data):
        if not self.hidden:
            self.out.append(data if self.pre else data.replace("\n", " "))


def page_text(source: str) -> str:
    """The visible text of one page: runs of blank lines collapsed to one, lines stripped."""
    p = _Text()
    p.feed(source)
    p.close()
    lines = [" ".join(l.split()) for l in "".join(p.out).splitlines()]
    text, blank = [], False
    for l in lines:
        if not l:
            blank = bool(text)
            continue
        if blank:
            text.append("")
        text.append(l)
        blank = False
    return "\n".join(text)


def main(argv: list[str]) -> int:
    if not argv:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    files: list[Path] = []
    for a in argv:
        p = Path(a)
        files += sorted(p.rglob("*.html")) if p.is_dir() else [p]
    for f in files:
        t = page_text(f.read_text(encoding="utf-8", errors="replace"))
        if t:
            sys.stdout.write(t + "\n\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
