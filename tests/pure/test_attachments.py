"""Pure tier: the attachment holder id, made and read in one place (core/attachments.py)."""
from reconciler.core.attachments import HolderId, gone, holder_id, holder_name, parse_holder


def test_an_id_made_is_read_back():
    text = holder_id("box", 4121, "a1b2c3d4", "987654")
    assert text == "box/4121/a1b2c3d4/987654"
    assert parse_holder(text) == HolderId("box", 4121, "a1b2c3d4", "987654")
    assert holder_name(text) == "box/4121"
    assert holder_id("box", 7, "n", None).endswith("/?") and parse_holder(holder_id("box", 7, "n", None)).start is None


def test_a_holder_is_gone_when_its_pid_is_dead_or_another_process():
    starts = {4121: "987654", 77: "111"}.get
    assert not gone("box/4121/n/987654", "box", starts)  # the same process
    assert gone("box/4121/n/000001", "box", starts)  # the pid was reused by another process
    assert gone("box/5000/n/1", "box", starts)  # no such pid
    assert not gone("box/77/n", "box", starts)  # an older id without a start time: alive while its pid is
    assert not gone("other/5000/n/1", "box", starts)  # another host is never judged
    assert not gone("box/notapid/n/1", "box", starts) and not gone("garbage", "box", starts)
