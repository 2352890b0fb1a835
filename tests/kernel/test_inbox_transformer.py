"""``inbox_transformer`` rewrites ``%inbox`` lines only in a cell made of line magics: anywhere else a
line that reads ``%inbox`` may be text (inside a string), and a cell magic's body is its own."""

from __future__ import annotations

from neuralis_jupyter.kernel.magics import inbox_transformer


def test_a_cell_of_one_inbox_line_becomes_a_magic_call() -> None:
    assert inbox_transformer(["%inbox d-1 Did you look?\n"]) == [
        "get_ipython().run_line_magic('inbox', 'd-1 Did you look?')\n"
    ]


def test_a_cell_of_line_magics_has_its_inbox_lines_rewritten() -> None:
    cell = ["%guard auto\n", "\n", "%inbox d-1 first?\n", "%inbox\n"]
    assert inbox_transformer(cell) == [
        "%guard auto\n",
        "\n",
        "get_ipython().run_line_magic('inbox', 'd-1 first?')\n",
        "get_ipython().run_line_magic('inbox', '')\n",
    ]


def test_an_inbox_line_inside_a_string_is_left_alone() -> None:
    cell = ['note = """\n', "%inbox d-1 not a call?\n", '"""\n']
    assert inbox_transformer(cell) == cell


def test_a_cell_magics_body_is_left_alone() -> None:
    cell = ["%%time\n", "%inbox d-1 hello\n"]
    assert inbox_transformer(cell) == cell
