"""tools/html_text.py (the second ablation corpus, scripts/corpus_pydoc.sh): visible text only
(scripts, styles, navigation and Sphinx sidebars dropped), blocks separated by one blank line,
entities decoded, pages in sorted order."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import html_text  # noqa: E402

PAGE = """<html><head><title>T</title><style>p {color: red}</style></head><body>
<div class="related"><a href="x">Navigation</a></div>
<div class="body"><h1>Heading&nbsp;one</h1><p>First   paragraph
spans lines &amp; entities.</p><script>var hidden = 1;</script>
<pre>code()\nmore()</pre><p>Second<br>line</p></div>
<div class="sphinxsidebar">Sidebar text</div></body></html>"""


def test_visible_text_only():
    t = html_text.page_text(PAGE)
    assert t.splitlines() == ["Heading one", "", "First paragraph spans lines & entities.", "",
                              "code()", "more()", "", "Second", "line"]
    for hidden in ("Navigation", "Sidebar", "hidden", "color", "T\n"):
        assert hidden not in t


def test_directory_in_sorted_order(tmp_path, capsys):
    (tmp_path / "b.html").write_text("<p>bee</p>")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.html").write_text("<p>ay</p>")
    (tmp_path / "a.html").write_text("<p>first</p>")
    (tmp_path / "notes.txt").write_text("not html")
    assert html_text.main([str(tmp_path)]) == 0
    assert capsys.readouterr().out == "first\n\nbee\n\nay\n\n"
