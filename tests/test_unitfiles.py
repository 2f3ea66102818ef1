"""Pure tier: unit files rendered from templates/units/."""
import configparser

import jinja2
import pytest

from reconciler.unitfiles import render


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
