"""Where things are and how they are set: paths of the state directory, the policy (pydantic-settings:
shipped default < the user's policy.toml < RES_* variables), the caller's environment and its secret
filter, the shipped files, safe file reads, the lock files, and a memo of values derived from objects
never changed in place. May import the floor below it only (the table in tests/pure/test_layers.py):
the core."""
