"""Would the agent's session have run this command without asking? The gate rewrites a command only
then (DESIGN §5.8: it never grants what the session would not have had). Each CLI judges its rules
against the command the hook hands back, so `res run … -- bash -c 'X'` is judged as `res run`, not
as X: a rule that denies or asks about X would no longer see it, and an allow rule for X would no
longer cover it. So the gate rewrites only where the session runs X unasked anyway (its permission
mode, or allow rules that cover every part of X) and no deny or ask rule could be about X. Where in
doubt, the command passes unchanged and the CLI judges it as it always does (docs/agent-hooks.md).

Pure: rule texts and words in, a yes or no out; config/agentsettings.py reads the files and the
CLI's command line. Deny and ask rules are matched loosely on purpose (by program name: a rule about
`make deploy` keeps every `make` line ungated); allow rules strictly (each simple command must be
covered, as written).

Import-light: fnmatch and posixpath only.
"""
from __future__ import annotations

import fnmatch
import posixpath
from typing import Iterable, NamedTuple

ALL = "*"  # a rule that may be about any command


class Rules(NamedTuple):
    """A session's rules for shell commands, as config/agentsettings.py gathered them."""

    unasked: bool  # the session runs every shell command without asking (bypass mode, yolo, a bare allow)
    allow: tuple[str, ...]  # command patterns it runs unasked (each CLI's own syntax, the tool name taken off)
    guarded: frozenset[str]  # programs some deny or ask rule may be about (ALL: any)


def _programs(words: list[str]) -> set[str]:
    """Every word that could be a program in a simple command, loosely (a wrapper's command too)."""
    return {posixpath.basename(w) for w in words if w and not w.startswith("-") and "=" not in w}


def runs_unasked(commands: list[list[str]], rules: Rules) -> bool:
    """`commands`: the simple commands of the line, as written (core.gate.simple_commands)."""
    if ALL in rules.guarded:
        return False
    for words in commands:
        if _programs(words) & rules.guarded:
            return False
    if rules.unasked:
        return True
    return all(any(pattern_covers(p, words) for p in rules.allow) for words in commands if words)


def pattern_covers(pattern: str, words: list[str]) -> bool:
    """Does an allow pattern cover this simple command? `npm run test:*` / `npm run test *` (a prefix,
    on word boundaries), `git * main` (a glob), `make test` (exactly). Claude Code's and Gemini's
    shapes (Gemini's `commandPrefix` is a prefix)."""
    text = " ".join(words)
    p = " ".join(pattern.split())
    if not p:
        return False
    if p in ("*", ":*"):
        return True
    if p.endswith(":*"):
        prefix = p[:-2].rstrip()
        return text == prefix or text.startswith(prefix + " ")
    if "*" in p:
        return fnmatch.fnmatchcase(text, p)
    return text == p


def prefix_covers(prefix: str, words: list[str]) -> bool:
    """Gemini's `run_shell_command(git status)`: the command starts with these words."""
    want = prefix.split()
    return bool(want) and words[:len(want)] == want


# ---------------------------------------------------------------- each CLI's rule shapes


def tool_pattern(rule: str, tool: str) -> str | None:
    """`Bash(npm test:*)` -> "npm test:*"; `Bash` -> "*"; another tool's rule -> None."""
    rule = rule.strip()
    if rule == tool:
        return "*"
    if rule.startswith(tool + "(") and rule.endswith(")"):
        return rule[len(tool) + 1:-1].strip() or "*"
    return None


def guarded_by(patterns: Iterable[str]) -> frozenset[str]:
    """The programs deny/ask patterns may be about: each pattern's first word (ALL for one that starts
    with a wildcard or cannot be read)."""
    out: set[str] = set()
    for p in patterns:
        first = p.split()[0] if p.split() else "*"
        first = first.removesuffix(":*")
        if not first or "*" in first or "?" in first or "[" in first:
            return frozenset({ALL})
        out.add(posixpath.basename(first))
    return frozenset(out)


def codex_guarded(texts: Iterable[str]) -> frozenset[str]:
    """The programs Codex execpolicy rules (`prefix_rule(pattern = ["git", "push"], decision =
    "forbidden")`, Starlark) that do not allow may be about. A rule whose decision is "allow" is left
    out; any rule this does not read (a pattern that is not a literal list) counts as ALL."""
    import re

    out: set[str] = set()
    for text in texts:
        for chunk in text.split("prefix_rule(")[1:]:
            chunk = chunk[:_end_of_call(chunk)]
            decision = re.search(r"""decision\s*=\s*["']([a-z_]+)["']""", chunk)
            if decision is not None and decision.group(1) == "allow":
                continue
            first = re.match(r"""\s*pattern\s*=\s*\[\s*(\[[^\]]*\]|["'][^"']*["'])""", chunk)
            if first is None:
                return frozenset({ALL})
            names = re.findall(r"""["']([^"']+)["']""", first.group(1))
            if not names:
                return frozenset({ALL})
            out.update(posixpath.basename(n) for n in names)
    return frozenset(out)


def _end_of_call(chunk: str) -> int:
    """Where the prefix_rule( call that `chunk` starts inside of ends (its closing parenthesis)."""
    depth = 1
    for i, c in enumerate(chunk):
        depth += c == "("
        depth -= c == ")"
        if depth == 0:
            return i
    return len(chunk)


def gemini_guarded(policies: Iterable[dict]) -> frozenset[str]:
    """The programs Gemini policy rules (`[[rule]] toolName = "run_shell_command" commandPrefix = "git
    push" decision = "deny"`) that deny or ask may be about; a rule on the shell by a regex, or on
    every tool, counts as ALL."""
    out: set[str] = set()
    for data in policies:
        rules = data.get("rule") if isinstance(data, dict) else None
        if not isinstance(rules, list):
            continue
        for r in rules:
            if not isinstance(r, dict) or r.get("decision") == "allow":
                continue
            tool = r.get("toolName")
            if tool not in (None, "*", "run_shell_command") and not (isinstance(tool, list) and "run_shell_command" in tool):
                continue
            prefix = r.get("commandPrefix")
            prefixes = [prefix] if isinstance(prefix, str) else prefix if isinstance(prefix, list) else None
            if not prefixes or not all(isinstance(p, str) and p.split() for p in prefixes):
                return frozenset({ALL})
            out.update(posixpath.basename(p.split()[0]) for p in prefixes)
    return frozenset(out)
