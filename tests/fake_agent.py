#!/usr/bin/env python3
"""A fake Claude Code session for the fault tier (hand-built: a harness for counting, not a sample of
real output): prints N numbered stream-json `assistant` events with usage (input_tokens = i,
output_tokens = 1, one message id each, no content blocks, so nothing is estimated beyond the
line's own count), each after the first preceded by a main-thread `user` tool-result line (as a real
session's next model call is), at a given pace, some stderr text, optionally a final `result` event,
and exits with a chosen code.

    fake_agent.py N [--pace SECONDS] [--rc CODE] [--result none|success|error] [--cost USD]

So a digest that ingested every line exactly once has input_tokens = N(N+1)/2, output_tokens = N,
iterations = 1 + the tool-result lines (N once all are out); any line counted twice or skipped shows
in those sums."""
import argparse
import json
import sys
import time

MODEL = "claude-sonnet-4-5-20250929"


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("n", type=int)
    p.add_argument("--pace", type=float, default=0.0)
    p.add_argument("--rc", type=int, default=0)
    p.add_argument("--result", choices=["none", "success", "error"], default="none")
    p.add_argument("--cost", type=float, default=0.0)
    a = p.parse_args()
    out = sys.stdout
    out.write(json.dumps({"type": "system", "subtype": "init", "session_id": "fake-session", "model": MODEL}) + "\n")
    out.flush()
    for i in range(1, a.n + 1):
        if i > 1:
            out.write(json.dumps({"type": "user", "message": {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": f"toolu_fake_{i - 1:06d}", "content": f"result of step {i - 1}"}]},
                "parent_tool_use_id": None, "session_id": "fake-session"}) + "\n")
        event = {"type": "assistant", "seq": i, "session_id": "fake-session", "parent_tool_use_id": None,
                 "message": {"id": f"msg_fake_{i:06d}", "type": "message", "role": "assistant", "model": MODEL,
                             "content": [],
                             "usage": {"input_tokens": i, "output_tokens": 1, "cache_creation_input_tokens": 0,
                                       "cache_read_input_tokens": 0}}}
        out.write(json.dumps(event) + "\n")
        out.flush()
        if i % 10 == 0:
            print(f"fake agent: progress {i}", file=sys.stderr, flush=True)
        if a.pace:
            time.sleep(a.pace)
    if a.result != "none":
        out.write(json.dumps({
            "type": "result", "subtype": "success" if a.result == "success" else "error_during_execution",
            "is_error": a.result == "error", "num_turns": a.n, "total_cost_usd": a.cost, "duration_ms": 1,
            "session_id": "fake-session", "result": "done",
            "usage": {"input_tokens": a.n * (a.n + 1) // 2, "output_tokens": a.n,
                      "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}}) + "\n")
        out.flush()
    return a.rc


if __name__ == "__main__":
    sys.exit(main())
