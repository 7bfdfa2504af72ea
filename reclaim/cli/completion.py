"""``reclaim completion SHELL``: a completion script for bash, zsh or tcsh, generated from the parser itself."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from pathlib import Path

import shtab

DESCRIPTION = """\
Print a completion script for SHELL: every command, flag and choice of this reclaim, and file or
directory names where a flag takes a path. Install it once:
  bash: reclaim completion bash > ~/.local/share/bash-completion/completions/reclaim
  zsh:  reclaim completion zsh > "${fpath[1]}/_reclaim"
  fish: reclaim completion fish > ~/.config/fish/completions/reclaim.fish
  tcsh: reclaim completion tcsh > ~/.reclaim.tcsh; echo 'source ~/.reclaim.tcsh' >> ~/.tcshrc
or load it into the shell at hand (bash: source <(reclaim completion bash)). A new reclaim may add
commands and flags: print the script again after an upgrade. It reads no settings and reaches no server."""


def script(parser: argparse.ArgumentParser, shell: str) -> str:
    """``parser``'s completion script for ``shell``, path flags completing file or directory names."""
    for action in _actions(parser):
        if action.type is Path or action.metavar in ("FILE", "PATH", "DIR"):
            kind = shtab.DIRECTORY if action.dest.endswith(("_dir", "_root")) else shtab.FILE
            action.complete = kind  # type: ignore[attr-defined]
    return str(shtab.complete(parser, shell=shell))


def _actions(parser: argparse.ArgumentParser) -> Iterator[argparse.Action]:
    for action in parser._actions:
        yield action
        if isinstance(action, argparse._SubParsersAction):
            for child in dict.fromkeys(action.choices.values()):  # aliases name one parser twice
                yield from _actions(child)


def cmd_completion(args: argparse.Namespace) -> int:
    from reclaim.cli.main import build_parser

    print(script(build_parser(), args.shell).rstrip("\n"))
    return 0


def register(sub: argparse._SubParsersAction, common: Callable[[argparse.ArgumentParser], None]) -> None:  # type: ignore[type-arg]
    completion = sub.add_parser("completion", help="print a shell completion script (bash, zsh, fish, ...)",
                                description=DESCRIPTION, formatter_class=argparse.RawDescriptionHelpFormatter)
    completion.add_argument("shell", choices=list(shtab.SUPPORTED_SHELLS), metavar="SHELL",
                            help=f"the shell to complete in: {', '.join(shtab.SUPPORTED_SHELLS)}")
    completion.set_defaults(standalone=cmd_completion)
