"""The vocabulary of the gate's rule decision (core/hookrules.py: the decision; each CLI's own part of
it in core/clis/) and the matchers of each CLI's shell rules: GRANT, REWRITE, ADMIT, a session's
Rules, and whether a rule could be about a line.

Pure: rule texts and words in, a decision out; config/agentsettings.py reads the files and the CLI's
command line. Deny and ask rules are matched loosely on purpose (by program name: a rule about `make
deploy` keeps every `make` line ungated; one about `res` or `bash` keeps every line ungated, as it
would match the rewrite); allow rules strictly, never looser than the CLI's own matcher: Claude Code
compares a rule with each subcommand's raw text (claude_covered), so a line with anything that
matcher might read otherwise (quotes, `$`, redirections to files, leading assignments, wrappers it
strips) is taken as not covered.

Import-light: posixpath and re only (typing's NamedTuple for Rules).
"""
from __future__ import annotations

import posixpath
import re
from typing import Iterable, NamedTuple

ALL = "*"  # a rule that may be about any command
GRANT = "grant"  # rewrite, answered with the CLI's own "allow" (where that grants nothing new)
REWRITE = "rewrite"  # rewrite, no decision: the CLI's rules judge the rewrite as they would the line
# pass the line unchanged, booked in place: the hook books its size under the call's request id before
# it runs, its post-tool event releases it (docs/agent-hooks.md); where no rewrite keeps the session's
# permissions and no deny or ask rule could be about the line (such a line may never run)
ADMIT = "admit"
# The programs of the rewritten line itself: a deny or ask rule about them would match the rewrite.
REWRITE_PROGRAMS = frozenset({"res", "bash"})
# Claude Code's permission modes in which allow rules decide what runs unasked (plan: a hook's allow no
# longer lets a writing command run; auto: a classifier decides, and broad rules are dropped).
CLAUDE_RULE_MODES = frozenset({"default", "acceptEdits", "dontAsk"})


class Rules(NamedTuple):
    """A session's rules for shell commands, as config/agentsettings.py gathered them."""

    unasked: bool  # the session runs every shell command without asking (bypass mode, yolo, never)
    allow: tuple[str, ...]  # command patterns it runs unasked (each CLI's own syntax, the tool name taken off)
    guarded: frozenset[str]  # programs some deny or ask rule may be about (ALL: any)
    sandboxed: bool = False  # its shell commands run in the CLI's sandbox (a res job would run outside it)
    # only what `allow` covers may run at all, anything else is denied (Gemini CLI: a run_shell_command(…)
    # entry in tools.allowed narrows the shell to its entries, YOLO or not)
    narrowed: bool = False
    # OpenCode: its rules for the bash tool in force, in order, (pattern, "allow" | "ask" | "deny"), the
    # last that matches a command deciding (its built-in ("*", "allow") first); () when unreadable
    ordered: tuple[tuple[str, str], ...] = ()
    # its shell commands may name any path unasked (Copilot CLI: only with --allow-all-paths, --allow-all or
    # --yolo; else a path outside its working directories is asked about, so is the rewrite's own `res`)
    any_path: bool = True


def _programs(words: list[str]) -> set[str]:
    """Every word that could be a program in a simple command, loosely (a wrapper's command too)."""
    return {posixpath.basename(w) for w in words if w and not w.startswith("-") and "=" not in w}


def guarded(commands: list[list[str]], rules: Rules) -> bool:
    """Could a deny or ask rule be about this line, or about the line that would replace it?"""
    if ALL in rules.guarded or REWRITE_PROGRAMS & rules.guarded:
        return True
    return any(_programs(words) & rules.guarded for words in commands)


# ---------------------------------------------------------------- Claude Code's allow rules

CLAUDE_LONGEST = 10_000  # a longer command always prompts
_SEPARATORS = re.compile(r"\s*(?:&&|\|\||;|\|)\s*")
# What Claude Code's matcher might read otherwise than as plain words: quotes, escapes, expansions,
# substitutions, subshells, groups, comments, globs, home, file redirections, backgrounding.
_NOT_PLAIN = re.compile(r"""['"\\$`(){}#*?\[\]~<>!&|;\t\n\r]""")
_FD_ONLY = frozenset({"2>&1", "1>&2", ">&2", ">/dev/null", "2>/dev/null", "&>/dev/null", "1>/dev/null"})
# Claude Code strips these before matching (so a rule is matched against what they run, which a raw
# prefix match would not see), or never lets a prefix rule approve what they run.
_CLAUDE_WRAPPERS = frozenset({"timeout", "time", "nice", "nohup", "stdbuf", "command", "builtin", "noglob", "xargs",
                              "watch", "setsid", "ionice", "flock", "env", "sudo", "doas", "exec", "eval", "sh",
                              "bash", "zsh", "dash"})


def claude_covered(line: str, patterns: Iterable[str]) -> bool:
    """Would Claude Code's allow rules (`patterns`: the parts in `Bash(…)`) let every subcommand of
    `line` run unasked? Never where its own matcher might not (module docstring): each subcommand must
    be plain words separated by single spaces (fd duplications and /dev/null redirections set aside),
    start with no assignment or wrapper, and match a rule by its raw text; `cd` into a relative
    directory inside the working one is read-only (Claude Code runs it unasked)."""
    patterns = [p for p in patterns if p.strip()]
    commands = plain_commands(line)
    if commands is None:
        return False
    for words in commands:
        first = words[0]
        if posixpath.basename(first) in _CLAUDE_WRAPPERS:
            return False
        if first == "find" and any(w in ("-exec", "-execdir", "-delete", "-ok", "-okdir") for w in words):
            return False
        if local_cd(words):
            continue
        if not any(claude_pattern_covers(p, " ".join(words)) for p in patterns):
            return False
    return True


def plain_commands(line: str) -> list[list[str]] | None:
    """The words of each command of `line` (fd duplications and /dev/null redirections set aside), or
    None where the matchers of the CLIs might read it otherwise than this (claude_covered): a command
    that is not plain words single-spaced, one that starts with an assignment, an empty line or one
    longer than CLAUDE_LONGEST. What Claude Code's, Copilot CLI's and OpenCode's rules are read on."""
    if not line.strip() or len(line) > CLAUDE_LONGEST:
        return None
    commands = []
    for part in _SEPARATORS.split(line.strip()):
        words = [w for w in part.split(" ") if w not in _FD_ONLY]
        text = " ".join(words)
        if not text or "" in words or _NOT_PLAIN.search(text) or "=" in words[0]:
            return None
        commands.append(words)
    return commands


def local_cd(words: list[str]) -> bool:
    """`cd` into a relative directory inside the working one: Claude Code and OpenCode run it unasked."""
    return words[0] == "cd" and len(words) == 2 and not words[1].startswith(("/", "-")) and ".." not in words[1].split("/")


def claude_pattern_covers(pattern: str, text: str) -> bool:
    """Does one Claude Code rule cover a subcommand's raw text? `*` (all), `P:*` and `P *` at the end
    (P itself, or P and a space and more), `*` elsewhere (any run of characters, spaces included; `?`
    and `[` are plain characters there), else the exact text."""
    p = pattern.strip()
    if p in ("*", ":*"):
        return True
    for tail in (":*", " *"):
        if p.endswith(tail) and "*" not in p[:-2]:
            prefix = p[:-2]
            return text == prefix or text.startswith(prefix + " ")
    if "*" in p:
        return re.fullmatch(".*".join(re.escape(piece) for piece in p.split("*")), text, re.DOTALL) is not None
    return text == p


# ---------------------------------------------------------------- Gemini CLI's allowed shell prefixes


def gemini_covered(line: str, prefixes: Iterable[str]) -> bool:
    """Would Gemini CLI's `run_shell_command(PREFIX)` entries let this line run? Its policy engine
    matches `"command":"PREFIX` followed by a space or the end against the raw line, then every
    subcommand's raw text the same way; a redirection makes an allow an ask. Never looser: plain words
    only (claude_covered's reading of what is plain), single spaces, no leading or trailing blanks, no
    redirection at all, no assignment first."""
    prefixes = [p for p in prefixes if p.strip() and p == p.strip()]
    if not line or line != line.strip() or len(line) > CLAUDE_LONGEST or not prefixes:
        return False
    for part in _SEPARATORS.split(line):
        words = part.split(" ")
        if not part or "" in words or _NOT_PLAIN.search(part) or "=" in words[0]:
            return False
        if not any(part == p or part.startswith(p + " ") for p in prefixes):
            return False
    return True


# ---------------------------------------------------------------- Copilot CLI's shell(…) rules

_COPILOT_SUBCOMMANDS = frozenset({"git", "gh"})  # approved by their first-level subcommand (`git push`)


def copilot_covered(line: str, patterns: Iterable[str]) -> bool:
    """Would Copilot CLI's `shell(…)` allow rules (`patterns`: the parts in the parentheses) let every
    command of `line` run unasked? `P:*` the command P and anything after a space (its stem), `P` a
    command whose name is exactly P (`copilot help permissions`: "in most cases … an exact match against
    the command name"; git and gh by their first-level subcommand, so only the whole text there), a
    rule of several words only the whole text. Never looser: plain words only, as claude_covered reads
    them."""
    patterns = [p.strip() for p in patterns if p.strip()]
    commands = plain_commands(line)
    if commands is None or not patterns:
        return False
    return all(any(_copilot_rule_covers(p, " ".join(words), words) for p in patterns) for words in commands)


def _copilot_rule_covers(pattern: str, text: str, words: list[str]) -> bool:
    if pattern == "*":
        return True
    if pattern.endswith(":*"):
        stem = pattern[:-2].strip()
        return bool(stem) and (text == stem or text.startswith(stem + " "))
    if " " in pattern or words[0] in _COPILOT_SUBCOMMANDS:
        return text == pattern
    return words[0] == pattern


# ---------------------------------------------------------------- OpenCode's bash permission patterns


def opencode_pattern_covers(pattern: str, text: str) -> bool:
    """Does one OpenCode pattern match a command's text as its Wildcard.match does? `*` any run of
    characters (`/` included), `?` one, a trailing ` *` optional (`git push *` matches `git push`),
    everything else literally, the whole text, case-sensitive."""
    body = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    if pattern.endswith(" *"):
        body = body[: -len(re.escape(" ") + ".*")] + "( .*)?"
    return re.fullmatch(body, text, re.DOTALL) is not None


def _opencode_could_be_about(pattern: str, program: str) -> bool:
    """Loosely: could a deny or ask pattern match a command run by `program`? Its first word is that
    program, or has a wildcard in it."""
    words = pattern.split()
    first = words[0] if words else "*"
    return "*" in first or "?" in first or posixpath.basename(first) == program


def opencode_allows(line: str, ordered: Iterable[tuple[str, str]]) -> bool:
    """Would OpenCode's bash rules (`ordered`, last match winning) run every command of `line` without
    asking? Never looser than its matcher: each command must be plain words single-spaced (as
    claude_covered reads them: what its parser sees as the command's text is then that text), and
    from the last rule back the first that decides is an allow that matches the text exactly, before
    any deny or ask rule that could loosely be about its program; `cd` into a relative directory
    inside the working one gives no pattern (OpenCode skips cd)."""
    ordered = list(ordered)
    commands = plain_commands(line)
    if not ordered or commands is None:
        return False
    return all(local_cd(words) or _opencode_last(ordered, " ".join(words), posixpath.basename(words[0]))
               for words in commands)


def opencode_allows_program(program: str, ordered: Iterable[tuple[str, str]]) -> bool:
    """Would OpenCode's bash rules run any command of `program` unasked (the rewrite's `res …`)? Only
    under a catch-all allow (`*`) that no deny or ask rule after it could be about."""
    for pattern, action in reversed(list(ordered)):
        if action == "allow":
            if pattern.strip() == "*":
                return True
        elif _opencode_could_be_about(pattern, program):
            return False
    return False


def _opencode_last(ordered: list[tuple[str, str]], text: str, program: str) -> bool:
    for pattern, action in reversed(ordered):
        if action == "allow":
            if opencode_pattern_covers(pattern, text):
                return True
        elif _opencode_could_be_about(pattern, program):
            return False
    return False  # no rule: OpenCode asks


def opencode_ordered(permissions: Iterable[object], auto: bool = False) -> tuple[tuple[str, str], ...] | None:
    """The bash rules in force, in order, from each `permission` value of OpenCode's config sources (a
    string: every tool; an object: per tool (`*`, `bash`, a wildcard key that matches bash), each a
    string or {pattern: action}), after its built-in ("*", "allow"). `auto` (--auto): an ask is
    answered "once", so it counts as allow. None: a value this does not read."""
    out = [("*", "allow")]
    for value in permissions:
        if value is None:
            continue
        if isinstance(value, str):
            items = [("*", value)]
        elif isinstance(value, dict):
            items = list(value.items())
        else:
            return None
        for key, rule in items:
            if not isinstance(key, str) or not opencode_pattern_covers(key, "bash"):
                continue
            pairs = [("*", rule)] if isinstance(rule, str) else list(rule.items()) if isinstance(rule, dict) else None
            if pairs is None:
                return None
            for pattern, action in pairs:
                if not isinstance(pattern, str) or action not in ("allow", "ask", "deny"):
                    return None
                out.append((pattern, "allow" if auto and action == "ask" else action))
    return tuple(out)


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
