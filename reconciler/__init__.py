"""res: a declarative resource reconciler for coding agents (see docs/ and DESIGN)."""
