"""What an auto-started loop gets of the caller's environment (loop/start.loop_environment): res's
own settings and what the loop needs, never a secret, RES_* or not: the unit's Environment is written
into its transient unit file (0644)."""
from __future__ import annotations

from reconciler.loop.start import loop_environment


def test_a_secret_named_or_shaped_res_variable_is_not_passed_to_the_loop():
    caller = {"RES_USER_RESERVE_GB": "8", "RES_STATE_DIR": "/s", "PATH": "/usr/bin", "HOME": "/home/u",
              "RES_API_TOKEN": "abc123", "RES_DB_PASSWORD": "pw", "RES_SLACK_WEBHOOK": "https://hooks.example/x",
              "RES_UPSTREAM": "https://u:hunter2@example.org/", "RES_NOTE": "sk-ant-api03-abcdefghijklmnop",
              "ANTHROPIC_API_KEY": "sk-ant-x", "EDITOR": "vi", "RES_TWO_LINES": "a\nb"}
    assert loop_environment(caller) == {"RES_USER_RESERVE_GB": "8", "RES_STATE_DIR": "/s", "PATH": "/usr/bin",
                                        "HOME": "/home/u"}
