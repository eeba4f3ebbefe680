"""Protected paths: files that tools the team allows read as configuration or code.

A write there is code execution later: ``.git/config`` (``core.fsmonitor`` runs on ``git
status``, ``diff.external`` on ``git diff``), ``.git/hooks/``, agy's plugins, hooks and MCP
servers under ``.agents/`` (loaded at agy's next start, by every thread of the workspace),
agy's rule files, and CI definitions a later push runs with the repository's secrets. So a
write to one always asks, even inside the workspace.
"""

from __future__ import annotations

import os
from pathlib import PurePath

# Any path component with one of these names (at any depth).
PROTECTED_DIRS = frozenset({".git", ".agents", ".gemini"})
# Files with one of these names, at any depth.
PROTECTED_FILES = frozenset({"agents.md", "gemini.md", ".gitlab-ci.yml", ".gitmodules"})
# A bare repository is a folder with HEAD, objects/ and refs/: git finds one without any
# `.git` (a hand-made one is enough), and reads its `config`.
GITDIR_FILES = frozenset({"config", "commondir", "gitdir"})


def protected_parts(parts: tuple[str, ...], *, head: bool = True) -> str | None:
    """Why a path made of ``parts`` (relative, or absolute) is protected, or None. ``head``:
    a file named HEAD counts (a write; as a command's argument it is mostly a revision)."""
    folded = [part.casefold() for part in parts]
    for index, part in enumerate(folded):
        if part in PROTECTED_DIRS:
            return f"`{parts[index]}/` holds configuration that tools run"
        if part == ".github" and folded[index + 1 : index + 2] == ["workflows"]:
            return "`.github/workflows/` holds CI jobs a push runs with the repository's secrets"
    if folded and folded[-1] in PROTECTED_FILES:
        return f"`{parts[-1]}` is read as instructions or configuration"
    if head and folded and folded[-1] == "head":
        return "a `HEAD` file makes its folder a git repository"
    return None


def names_protected(word: str, *, head: bool = False) -> bool:
    """Whether a command's argument names a protected path (``.git/config``, ``--x=.agents``).
    ``head``: a file named HEAD counts too."""
    candidates = [word, *word.split("=", 1)[1:]]
    return any(protected_parts(PurePath(c).parts, head=head) is not None for c in candidates if c)


def protected_write(path: str, root: str) -> str | None:
    """Why a write to the resolved ``path`` (inside the resolved ``root``) must ask, or None."""
    relative = os.path.relpath(path, root)
    parts = PurePath(relative).parts if not relative.startswith("..") else PurePath(path).parts
    why = protected_parts(parts)
    if why is not None:
        return why
    folder = os.path.dirname(path)
    if os.path.basename(path) in GITDIR_FILES and os.path.exists(os.path.join(folder, "HEAD")):
        return "its folder holds a `HEAD`: git reads it as a repository's configuration"
    for gitdir in _gitdirs(folder, root):
        if path == gitdir or path.startswith(gitdir + os.sep):
            return "it is inside the git directory a `.git` file points to"
    return None


def _gitdirs(folder: str, root: str) -> list[str]:
    """The git directories that `.git` files between ``folder`` and ``root`` point to."""
    found = []
    current = folder
    while True:
        dotgit = os.path.join(current, ".git")
        if os.path.isfile(dotgit):
            try:
                with open(dotgit, encoding="utf-8", errors="replace") as file:
                    first = file.readline().strip()
            except OSError:
                first = ""
            if first.startswith("gitdir:"):
                target = os.path.join(current, first.removeprefix("gitdir:").strip())
                found.append(os.path.realpath(target))
        if current == root or os.path.dirname(current) == current or not current.startswith(root):
            return found
        current = os.path.dirname(current)
