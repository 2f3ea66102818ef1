"""Desired state: the TOML files agents and the user write (DESIGN §2, §4). The small writer (lock,
validate, edit with tomlkit keeping comments, atomic replace), the reader a pass uses (a broken file is
never read as empty), and the tracking of changes made to the user's files outside the writer; one
module per job (reader, writer, disk, toml_in, toml_out, lock, note, templates, changes, lastgood). May
import the floors below it (the table in tests/pure/test_layers.py): observed, recorded (the last good
version of a file lives in state.db), render, config and the core; never runtime, on its own floor."""
