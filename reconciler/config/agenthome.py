"""Where each agent CLI keeps its files on this machine: the one resolver of a CLI's user directory
($CLAUDE_CONFIG_DIR, $CODEX_HOME, $GEMINI_CLI_HOME, $OPENCODE_CONFIG_DIR, else its default under
$HOME, or under $XDG_CONFIG_HOME for one under ~/.config; core/agentclis.py says which) and of the file its hooks are in. The gate's rules reader (config/agentsettings.py),
`res run`'s model reader (config/agentmodel.py), `res hook install` and `res doctor` all ask here.

Two forms of one directory: `config_dir`, the path as the CLI is given it, for reading the files in
it; `named_config_dir`, the path `res hook install` writes and names (made absolute; for Codex, whose
trust keys name files by the path Codex computes, $CODEX_HOME with its links resolved).

Import-light: os only (the gate reads the rules of a heavy line with it).
"""
from __future__ import annotations

import os

from reconciler.core.agentclis import CLIS


def user_home(environ) -> str:
    """$HOME, else the password database's."""
    return environ.get("HOME") or os.path.expanduser("~")


def config_dir(cli: str, environ) -> str:
    """The directory `cli` keeps its user files in, as the CLI finds it: its variable where set and not
    empty (the directory under it, for Gemini CLI), else its default under $HOME. The path as given:
    a relative one stays relative, links are not resolved."""
    spec = CLIS[cli]
    given = environ.get(spec.home_var)
    if given:
        return os.path.join(given, spec.home_sub) if spec.home_sub else given
    xdg = environ.get("XDG_CONFIG_HOME")
    if xdg and os.path.isabs(xdg) and spec.home_default.startswith(".config/"):  # OpenCode's: xdg-basedir's rule
        return os.path.join(xdg, spec.home_default[len(".config/"):])
    return os.path.join(user_home(environ), spec.home_default)


def named_config_dir(cli: str, environ) -> str:
    """config_dir as `res hook install` writes and names it: for a CLI that resolves its variable's
    links (Codex: CODEX_HOME canonicalized, its default ~/.codex taken as it is) the same, else made
    absolute."""
    spec = CLIS[cli]
    path = config_dir(cli, environ)
    if spec.home_realpath:
        return os.path.realpath(path) if environ.get(spec.home_var) else path
    return os.path.abspath(path)


def settings_path(cli: str, scope: str, environ, cwd: str | None = None) -> str:
    """The file `cli`'s hooks are in: in its user directory (scope "user"), or in its folder at the
    root of the checkout `cwd` is in, else in `cwd` (scope "project")."""
    spec = CLIS[cli]
    if scope == "project":
        from reconciler.config.gitrepo import project_root

        return os.path.join(project_root(cwd or os.getcwd()), spec.project_dir, spec.hooks_file)
    return os.path.join(named_config_dir(cli, environ), spec.hooks_file)
