"""Pure tier: unit files rendered from templates/units/."""
import configparser

import jinja2
import pytest

from reconciler.render.unitfiles import render


def parse(text: str) -> configparser.ConfigParser:
    cp = configparser.ConfigParser(interpolation=None, strict=True)
    cp.optionxform = str
    cp.read_string(text)
    return cp


def test_agents_slice_carries_the_weights_and_memory_high():
    cp = parse(render("agents.slice.j2", name="agents.slice", cpu_weight=5, io_weight=5, memory_high="12G"))
    assert dict(cp["Slice"]) == {"CPUWeight": "5", "IOWeight": "5", "MemoryHigh": "12G"}


def test_jobs_slice_is_managed_by_oomd_only_where_there_is_one():
    assert parse(render("jobs.slice.j2", name="agents-jobs.slice", oomd=True))["Slice"]["ManagedOOMMemoryPressure"] == "kill"
    assert not parse(render("jobs.slice.j2", name="agents-jobs.slice", oomd=False)).has_section("Slice")


def test_serve_service_runs_the_loop_and_a_missing_value_is_an_error():
    cp = parse(render("res-serve.service.j2", exec_start="/usr/bin/res serve", state_dir="/home/u/.local/state/res"))
    assert cp["Service"]["ExecStart"] == "/usr/bin/res serve"
    with pytest.raises(jinja2.UndefinedError):
        render("res-serve.service.j2", exec_start="/usr/bin/res serve")


def test_install_unit_writes_ours_and_never_replaces_or_removes_the_users_own(tmp_path):
    from reconciler.runtime.unitfiles import install_unit, remove_unit

    text = render("jobs.slice.j2", name="agents-jobs.slice", oomd=False)
    assert install_unit(tmp_path, "agents-jobs.slice", text) is True
    assert install_unit(tmp_path, "agents-jobs.slice", text) is False  # unchanged: no reload due
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".res-tmp")]
    mine = tmp_path / "agents.slice"
    mine.write_text("[Slice]\nCPUWeight=50\n")  # the user's own, before res
    with pytest.raises(OSError, match="was not written by res"):
        install_unit(tmp_path, "agents.slice", render("agents.slice.j2", name="agents.slice", cpu_weight=20,
                                                      io_weight=20, memory_high=1))
    with pytest.raises(OSError, match="was not written by res"):
        remove_unit(tmp_path, "agents.slice")
    assert mine.read_text() == "[Slice]\nCPUWeight=50\n"
    (tmp_path / "link.slice").symlink_to(tmp_path / "agents-jobs.slice")
    with pytest.raises(OSError, match="symlink"):
        install_unit(tmp_path, "link.slice", text)
    assert remove_unit(tmp_path, "agents-jobs.slice") is True and remove_unit(tmp_path, "agents-jobs.slice") is False
