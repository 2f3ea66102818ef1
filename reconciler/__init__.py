"""res: a declarative resource reconciler for coding agents (see docs/ and DESIGN)."""


def code_fingerprint() -> str:
    """What identifies this copy of res's code (names, sizes and times of its modules): a loop
    reports the one it started with, so `res service install` can tell that the code changed since
    (an upgrade) and restart it."""
    import hashlib
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    h = hashlib.sha256()
    for root, dirs, files in os.walk(here):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".py", ".toml", ".j2")):
                st = os.stat(os.path.join(root, name))
                h.update(f"{os.path.relpath(os.path.join(root, name), here)}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:16]
