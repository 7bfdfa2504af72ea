"""mkdocs hook: renders every reclaim command's ``--help`` into the CLI reference page at build time.

The page holds a marker; this hook replaces it with one section per command, found by walking the
parser that ``reclaim.cli.main.build_parser()`` returns, so the reference cannot drift from the code.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager

from mkdocs.config.defaults import MkDocsConfig
from mkdocs.exceptions import PluginError
from mkdocs.structure.files import Files
from mkdocs.structure.pages import Page

MARKER = "<!-- cli-reference -->"
# Help texts wrap at the terminal width; a fixed one makes the page the same on every machine. NO_COLOR
# keeps argparse's colours (Python 3.14 and later, at a terminal) out of the page.
HELP_ENVIRONMENT = {"COLUMNS": "100", "NO_COLOR": "1"}


@contextmanager
def _help_environment() -> Iterator[None]:
    before = {name: os.environ.get(name) for name in HELP_ENVIRONMENT}
    os.environ.update(HELP_ENVIRONMENT)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _subcommands(parser: argparse.ArgumentParser) -> Iterator[tuple[str, str, argparse.ArgumentParser]]:
    """Each sub-command of ``parser`` once (aliases skipped), with its one-line help."""
    seen: set[int] = set()
    for action in parser._actions:
        if not isinstance(action, argparse._SubParsersAction):
            continue
        helps = {choice.dest: choice.help or "" for choice in action._choices_actions}
        for name, sub in action.choices.items():
            if id(sub) in seen or helps.get(name) == argparse.SUPPRESS:
                continue
            seen.add(id(sub))
            yield name, helps.get(name, ""), sub


def _walk(
    parser: argparse.ArgumentParser, summary: str = "", depth: int = 0
) -> Iterator[tuple[int, str, argparse.ArgumentParser]]:
    yield depth, summary, parser
    for _name, help_text, sub in _subcommands(parser):
        yield from _walk(sub, help_text, depth + 1)


def _fence(text: str) -> str:
    ticks = "```"
    while ticks in text:
        ticks += "`"
    return f"{ticks}text\n{text.rstrip()}\n{ticks}"


def render() -> str:
    """The reference: a list of every command, then each command's heading, summary and full help."""
    try:
        from reclaim.cli.main import build_parser
    except Exception as exc:  # any import failure must stop the build, not leave an empty page
        raise PluginError(f"cli_reference: cannot import reclaim.cli.main.build_parser: {exc!r}") from exc
    with _help_environment():
        commands = list(_walk(build_parser()))
        index = ["| command | what it does |", "|---|---|"]
        sections = []
        for depth, summary, parser in commands:
            heading = "#" * min(2 + max(depth - 1, 0), 4)
            if depth:
                index.append(f"| [`{parser.prog}`](#{_slug(parser.prog)}) | {summary.replace('|', '&#124;')} |")
            lines = [f"{heading} `{parser.prog}` {{#{_slug(parser.prog)}}}", ""]
            if summary:
                lines += [summary[0].upper() + summary[1:].rstrip(".") + ".", ""]
            lines.append(_fence(parser.format_help()))
            sections.append("\n".join(lines))
    return "\n".join(index) + "\n\n" + "\n\n".join(sections) + "\n"


def _slug(prog: str) -> str:
    return prog.replace(" ", "-")


def on_page_markdown(markdown: str, /, *, page: Page, config: MkDocsConfig, files: Files) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, render())
