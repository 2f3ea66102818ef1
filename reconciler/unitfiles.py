"""Unit files that are files (slices, the loop's own service) rendered from templates/units/ with
jinja2 (DESIGN §6). Rendering is pure text; writing them is the caller's."""
from __future__ import annotations


def render(template: str, **values) -> str:
    import jinja2

    from .resources import shipped

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(shipped("templates/units"))),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True,
                             trim_blocks=True, lstrip_blocks=True, autoescape=False)
    return env.get_template(template).render(**values)
