"""One method text: docs/method.md, the report and the site say the same, with the code's defaults."""

import dataclasses
from pathlib import Path

import pytest

from bench import method, profiles, stats
from bench.cases import Case
from bench.report.html import render

DOC = Path(__file__).parents[1] / "docs" / "method.md"
README = Path(__file__).parents[1] / "README.md"


def test_docs_method_carries_the_current_text():
    section = method.section_of(DOC.read_text())
    assert section is not None, "docs/method.md lost its generated section's markers"
    assert section == method.markdown(), "stale: run python -m bench.method docs/method.md"
    assert "docs/method.md" in README.read_text() and "## Method in short" not in README.read_text()


def test_the_text_states_the_codes_defaults(monkeypatch):
    text = method.markdown()
    assert f"a CV above {stats.UNSTABLE_CV * 100:.0f}%" in text
    std = profiles.PROFILES["standard"]
    assert f"fixed round counts ({', '.join(map(str, std.looks))};" in text
    assert f"+-{100 * std.ci_target['gpu']:g}% on GPUs" in text
    # a changed default changes the text (nothing is typed in twice)
    monkeypatch.setattr(stats, "UNSTABLE_CV", 0.2)
    monkeypatch.setattr(method.derive_mod, "BUSY_OTHER_CPU_PCT", 25.0)
    monkeypatch.setitem(profiles.PROFILES, "large", dataclasses.replace(profiles.PROFILES["large"], looks=(6, 30)))
    changed = method.markdown()
    assert "a CV above 20%" in changed and "more than 25% of the CPU" in changed and "`large` 6, 30)" in changed


def test_the_html_list_escapes_and_keeps_only_its_own_tags(monkeypatch):
    monkeypatch.setattr(method, "markdown", lambda: "- **bold** `a<b>` *em* <script>x</script> 2*3*4")
    out = method.html_list()
    assert "<strong>bold</strong>" in out and "<code>a&lt;b&gt;</code>" in out and "<em>em</em>" in out
    assert "<script>" not in out and "&lt;script&gt;" in out and "2*3*4" in out
    monkeypatch.setattr(method, "markdown", lambda: "- one\nnot a bullet")
    with pytest.raises(ValueError, match="bullet"):
        method.html_list()


def test_the_report_template_shows_the_same_bullets():
    page = render("method.html")
    items = [line for line in method.markdown().splitlines()]
    assert page.count("<li>") == len(items) >= 10
    assert "<strong>fp32 means TF32 off</strong>" in page


def test_docs_method_names_every_case_field():
    text = " ".join(DOC.read_text().split())
    listed = text.split("A case is a frozen `Case` (", 1)[1].split(")", 1)[0].replace("-", " ").split(", ")
    assert listed == [f.name.replace("_", " ") for f in dataclasses.fields(Case)]
