"""Events as the dashboard shows them to people: fields, not JSON."""

from __future__ import annotations

from jobengine.dashboard.render import Renderer, event_fields, field_text


def test_progress_is_a_percentage_times_are_timestamps_and_text_has_no_quotes() -> None:
    data = {
        "progress": 0.6666666666666666, "job_progress": 0.2222222222222222, "retry_at": 1767225600.25,
        "message": 'said "hi"', "phase": "load", "index": 1, "duration": 2.5, "ratio": 0.123456789,
        "tags": ["a", "b"], "done": True, "worker": None,
    }  # fmt: skip
    fields = {f.key: f for f in event_fields(data)}
    assert fields["progress"].text == "67%"
    assert fields["job_progress"].text == "22%"
    assert fields["retry_at"].text == "2026-01-01 00:00:00Z"
    assert fields["retry_at"].iso.startswith("2026-01-01T00:00:00")
    assert fields["message"].text == 'said "hi"'
    assert fields["index"].text == "1" and fields["index"].iso == ""
    assert fields["duration"].text == "2.5 s"
    assert fields["ratio"].text == "0.1235"
    assert fields["tags"].text == '["a", "b"]'
    assert fields["done"].text == "yes" and fields["worker"].text == "—"
    assert [f.key for f in event_fields(data)] == sorted(data)


def test_small_numbers_in_time_fields_and_non_objects_stay_numbers() -> None:
    assert field_text("at", 12) == "12"  # not a UNIX time: an offset or a count
    assert field_text("progress", 3) == "3"  # out of 0..1: not a fraction
    assert event_fields(None) == []
    assert [(f.key, f.text) for f in event_fields(0.5)] == [("value", "0.5")]


def test_the_event_macro_writes_key_value_pairs_escaped() -> None:
    renderer = Renderer()
    template = renderer.env.from_string('{% from "_macros.html" import event_data %}{{ event_data(d) }}')
    html = template.render(d={"progress": 0.5, "message": "<b>x</b>", "at": 1767225600.0})
    assert "<dt>progress</dt><dd>50%</dd>" in html
    assert "&lt;b&gt;x&lt;/b&gt;" in html and "<b>x</b>" not in html
    assert '<time datetime="2026-01-01T00:00:00+00:00" data-local>2026-01-01 00:00:00Z</time>' in html
    assert "0.5," not in html and "{" not in html
    assert template.render(d={}) == "—"
