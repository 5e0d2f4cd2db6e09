"""tools/docs_commands.py: the outputs pasted under the documentation's commands are re-run and
compared (``...`` stands for any lines), replaced with --write, and a block can opt out."""

from __future__ import annotations

from tools.docs_commands import check_page, matches, reshaped

PAGE = """# A page

```sh
printf 'a\\nb\\nc\\nd\\n'
```
```
a
...
d
```

<!-- docs-commands: skip -->
```sh
date +%N
```
```
123
```

```sh
echo one; echo two
```
```
one
three
```
"""


def test_ellipsis_stands_for_any_lines():
    assert matches("a\n...\nd", "a\nb\nc\nd")
    assert matches("...\nc\n...", "a\nb\nc\nd")
    assert not matches("a\n...\nx", "a\nb\nc\nd")
    assert not matches("...\nx\n...", "a\nb\nc\nd")
    assert matches("a\nb", "a\nb") and not matches("a\nb", "a\nb\nc")


def test_reshaped_keeps_the_pasted_shape():
    assert reshaped("a\n...", "x\ny\nz") == "x\n..."
    assert reshaped("a\n...\nd", "x\ny\nz") == "x\n...\nz"
    assert reshaped("...\nc\n...", "x\ny") is None
    assert reshaped("a", "x\ny") == "x\ny"


def test_check_reports_and_write_replaces_only_differing_blocks(tmp_path):
    page = tmp_path / "page.md"
    page.write_text(PAGE)
    problems = check_page(page, write=False)
    assert len(problems) == 1 and "echo one; echo two" in problems[0]
    assert page.read_text() == PAGE
    check_page(page, write=True)
    assert page.read_text() == PAGE.replace("one\nthree", "one\ntwo")
    assert check_page(page, write=False) == []
