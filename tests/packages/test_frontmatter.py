from __future__ import annotations

import re

import pytest

from neuralis_jupyter.packages import FrontmatterError, parse_frontmatter


def parse(text: str):
    return parse_frontmatter(text, source="agents/x.md")


def test_a_file_without_frontmatter_is_all_body():
    fm = parse("# Title\n\nkey: not frontmatter\n")
    assert (fm.present, dict(fm.fields), fm.body) == (False, {}, "# Title\n\nkey: not frontmatter\n")


def test_scalars_quotes_and_flat_lists():
    fm = parse(
        "---\n"
        "name: explore\n"
        'description: "Where: here, there"\n'
        "single: 'it''s raw'\n"
        "requiredFeatures: [core.web, 'core.execute', \"a, b\"]\n"
        "empty: []\n"
        "# a comment line\n"
        "\n"
        "credentials:\n"
        "  - TAVILY_API_KEY\n"
        "  - 'BRAVE_API_KEY'\n"
        "---\n"
        "\n"
        "Body line {{agentId}}\n"
    )
    assert fm.present
    assert fm.fields == {
        "name": "explore",
        "description": "Where: here, there",
        "single": "it's raw",
        "requiredFeatures": ("core.web", "core.execute", "a, b"),
        "empty": (),
        "credentials": ("TAVILY_API_KEY", "BRAVE_API_KEY"),
    }
    assert fm.body == "Body line {{agentId}}\n"
    assert fm.warnings == ()


def test_a_key_with_nothing_after_it_reads_as_the_empty_string():
    assert parse("---\nallowed-tools:\nname: x\n---\n").fields == {"allowed-tools": "", "name": "x"}


def test_crlf_and_a_byte_order_mark_are_tolerated():
    fm = parse("\ufeff---\r\nname: x\r\n---\r\nbody\r\n")
    assert fm.fields == {"name": "x"}
    assert fm.body == "body\n"


@pytest.mark.parametrize(
    "block",
    [
        "requires:\n  features: [core.web]\n",
        "requires:\n  features:\n    - core.web\n",
        "requires: {features: [core.web]}\n",
        "description: |\n  line one\n  line two\n",
    ],
)
def test_nested_and_multiline_forms_warn_and_are_ignored(block):
    fm = parse(f"---\nname: x\n{block}after: kept\n---\nbody\n")
    assert fm.fields == {"name": "x", "after": "kept"}
    assert len(fm.warnings) == 1
    assert "agents/x.md" in fm.warnings[0]
    assert "not support" in fm.warnings[0]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("---\nname: x\nbody without end\n", "never closed"),
        ("---\nname: x\nname: y\n---\n", "line 3: key 'name' appears twice"),
        ("---\n- orphan\n---\n", "line 2: a '- item' line belongs under a 'key:' line"),
        ("---\nname x\n---\n", "line 2: expected 'key: value'"),
        ("---\nname: x\n  indented: y\n---\n", "line 3: unexpected indentation"),
        ("---\nlist: [a, b\n---\n", "must end with ']'"),
        ("---\nlist: [a, , b]\n---\n", "empty item"),
        ("---\nlist: [a, b,]\n---\n", "ends with a comma"),
        ("---\nlist: [a, [b]]\n---\n", "lists are flat"),
    ],
)
def test_malformed_frontmatter_names_the_file_and_line(text, message):
    with pytest.raises(FrontmatterError, match=re.escape("agents/x.md")) as info:
        parse(text)
    assert message in str(info.value)


def test_only_a_leading_dash_line_opens_frontmatter():
    fm = parse("Intro\n---\nname: x\n---\n")
    assert not fm.present
    assert fm.body.startswith("Intro")


def test_the_body_keeps_later_separators_and_text_verbatim():
    fm = parse("---\nname: x\n---\nA\n\n---\nB  \n")
    assert fm.body == "A\n\n---\nB  \n"
