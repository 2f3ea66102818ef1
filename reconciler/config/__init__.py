"""Where things are and how they are set: paths of the state directory, the policy (pydantic-settings:
shipped default < the user's policy.toml < RES_* variables), the caller's environment and its secret
filter, the shipped files, safe file reads and the lock files. May import the core (quantities) only."""
