"""Unit files that are files (slices, the loop's own service) rendered from templates/units/ with
jinja2 (DESIGN §6): text only. runtime/unitfiles.py writes them."""
from __future__ import annotations


def render(template: str, **values) -> str:
    import jinja2

    from reconciler.config.resources import shipped

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(shipped("templates/units"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return env.get_template(template).render(**values)


MARK = "rendered by res"  # in the first lines of every unit file res writes (templates/units/*.j2)


OLD_MARKS = ("rendered by `res service install`",)  # what res wrote before MARK was one string


def ours(text: str) -> bool:
    return any(mark in line for line in text.splitlines()[:3] for mark in (MARK, *OLD_MARKS))


SLICE_TEMPLATES = ("agents.slice.j2", "jobs.slice.j2")


def slice_units(policy, ram_gb: float, oomd: bool) -> dict[str, str]:
    """The two slices' unit files: the agents slice with its normal (game off) share, which game
    mode overrides at runtime; the jobs slice under it, left to systemd-oomd where there is one."""
    from reconciler.core.game import slice_target
    from reconciler.core.models import Game

    normal = slice_target(policy.rules(), Game(), 0.0, ram_gb, 0.0)
    return {
        policy.agents_slice: render("agents.slice.j2", name=policy.agents_slice, cpu_weight=normal["CPUWeight"],
                                    io_weight=normal["IOWeight"], memory_high=normal["MemoryHigh"]),
        policy.jobs_slice: render("jobs.slice.j2", name=policy.jobs_slice, oomd=oomd),
    }
