"""Unit tests of the OpenAI-completions helpers and the Prometheus metrics reader."""

from __future__ import annotations

import json

import msgspec
import pytest

from proto.messages import ClassifiedRequest, Sampling
from services.worker.vllm_metrics import read_engine_metrics
from services.worker.vllm_protocol import (
    DONE,
    FILL_TOKEN_ID,
    GREEDY_TEMPERATURE,
    TokenCounter,
    completion_body,
    error_message,
    parse_sse_line,
)
from tests.unit.worker.helpers import classified


def test_a_count_only_prompt_becomes_token_ids_of_exactly_that_length() -> None:
    """Test that a request with only a token count is sent as that many token ids."""
    body = completion_body(classified("a", prompt_tokens=37, max_tokens=9), "served")
    assert body["prompt"] == [FILL_TOKEN_ID] * 37
    assert (body["model"], body["max_tokens"], body["ignore_eos"], body["stream"]) == (
        "served",
        9,
        True,
        True,
    )
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}


def test_a_request_without_sampling_is_greedy_with_no_other_sampling_field() -> None:
    """Test that trace replay (no Request.sampling) keeps temperature 0.0 and sends none of
    the other sampling fields, so vLLM's defaults hold for them."""
    body = completion_body(classified("a"), "m")
    assert body["temperature"] == GREEDY_TEMPERATURE == 0.0
    assert not {"top_p", "stop", "seed", "presence_penalty", "frequency_penalty"} & set(body)


def _with_sampling(sampling: Sampling) -> ClassifiedRequest:
    request = classified("a", prompt="hello", max_tokens=40)
    return msgspec.structs.replace(
        request, request=msgspec.structs.replace(request.request, sampling=sampling)
    )


def test_the_sampling_fields_a_client_set_are_sent_and_only_those() -> None:
    """Test that the client's stop sequences and temperature reach vLLM under OpenAI's names,
    an unset field is left out (not null), and the rest of the body is unchanged."""
    body = completion_body(_with_sampling(Sampling(temperature=0.8, stop=["###"])), "m")
    assert (body["temperature"], body["stop"]) == (0.8, ["###"])
    assert not {"top_p", "seed", "presence_penalty", "frequency_penalty"} & set(body)
    assert (body["prompt"], body["max_tokens"], body["stream"]) == ("hello", 40, True)
    full = Sampling(
        temperature=1.2,
        top_p=0.5,
        stop=["a", "b"],
        seed=-7,
        presence_penalty=0.25,
        frequency_penalty=-1.5,
    )
    sent = completion_body(_with_sampling(full), "m")
    assert {k: sent[k] for k in msgspec.structs.asdict(full)} == msgspec.structs.asdict(full)
    assert json.loads(json.dumps(sent)) == sent  # plain JSON, as aiohttp posts it


def test_sampling_without_temperature_keeps_the_greedy_default() -> None:
    """Test that a client setting only stop still gets temperature 0.0 (the documented
    default), not vLLM's 1.0."""
    body = completion_body(_with_sampling(Sampling(stop=["\n"], seed=3)), "m")
    assert (body["temperature"], body["stop"], body["seed"]) == (0.0, ["\n"], 3)


def test_a_text_prompt_is_sent_as_text() -> None:
    """Test that a request carrying prompt text sends the text."""
    assert completion_body(classified("a", prompt="hello"), "m")["prompt"] == "hello"


def test_sse_lines_parse_into_events_done_or_nothing() -> None:
    """Test that data lines decode, [DONE] is recognised and other lines are skipped."""
    assert parse_sse_line(b'data: {"choices": []}\n') == {"choices": []}
    assert parse_sse_line(b"data: [DONE]\n") == DONE
    assert parse_sse_line(b"\n") is None
    assert parse_sse_line(b": keep-alive\n") is None
    assert error_message(parse_sse_line(b"data: [1, 2]\n")) is not None  # type: ignore[arg-type]


def test_both_vllm_error_shapes_are_recognised() -> None:
    """Test that old (object=error) and new (error object) error events give their message."""
    assert error_message({"object": "error", "message": "too long"}) == "too long"
    assert error_message({"error": {"message": "boom", "code": 400}}) == "boom"
    assert error_message({"choices": []}) is None


def test_cumulative_usage_counts_tokens_exactly_even_when_chunks_carry_several() -> None:
    """Test that per-chunk cumulative usage gives exact counts, whatever each chunk holds."""
    counter = TokenCounter()
    choice = {"text": "ab", "finish_reason": None}
    assert counter.update({"choices": [choice], "usage": {"completion_tokens": 1}}) == 1
    assert counter.update({"choices": [choice], "usage": {"completion_tokens": 4}}) == 3
    last = {"text": "c", "finish_reason": "length"}
    assert counter.update({"choices": [last], "usage": {"completion_tokens": 5}}) == 1
    assert counter.update({"choices": [], "usage": {"completion_tokens": 5}}) == 0
    assert (counter.counted, counter.finish_reason) == (5, "length")


def test_without_per_chunk_usage_the_final_usage_tops_the_count_up() -> None:
    """Test that chunks count one token (or their token_ids) and the final usage fixes the sum."""
    counter = TokenCounter()
    assert counter.update({"choices": [{"text": "a"}], "usage": None}) == 1
    assert counter.update({"choices": [{"text": "bc", "token_ids": [5, 6]}]}) == 2
    assert counter.update({"choices": [], "usage": {"completion_tokens": 6}}) == 3
    assert counter.counted == 6


NEW_STYLE = """
# HELP vllm:num_requests_running Number of requests in model execution batches.
# TYPE vllm:num_requests_running gauge
vllm:num_requests_running{engine="0",model_name="m"} 3.0
vllm:num_requests_running{engine="1",model_name="m"} 2.0
vllm:num_requests_waiting{engine="0",model_name="m"} 4.0
vllm:kv_cache_usage_perc{engine="0",model_name="m"} 0.25
vllm:kv_cache_usage_perc{engine="1",model_name="m"} 0.75
vllm:cache_config_info{block_size="16",engine="0",num_gpu_blocks="1000"} 1.0
vllm:cache_config_info{block_size="16",engine="1",num_gpu_blocks="1000"} 1.0
vllm:generation_tokens_total{model_name="m"} 1.2e3
"""

OLD_STYLE = """
vllm:num_requests_running{model_name="m"} 1.0
vllm:num_requests_waiting{model_name="m"} 0.0
vllm:gpu_cache_usage_perc{model_name="m"} 0.4
"""


def test_current_metric_names_are_read_and_summed_over_engines() -> None:
    """Test that vLLM's current names are read, counts summed and KV use averaged."""
    m = read_engine_metrics(NEW_STYLE)
    assert (m.running, m.waiting) == (5, 4)
    assert m.kv_usage == pytest.approx(0.5)
    assert (m.kv_blocks_total, m.block_size) == (2000, 16)
    assert m.generation_tokens == 1200.0
    assert not m.clock_control
    assert m.energy_j is None


def test_the_old_kv_gauge_name_is_read_when_the_new_one_is_absent() -> None:
    """Test that vllm:gpu_cache_usage_perc (before the rename) still gives KV use."""
    m = read_engine_metrics(OLD_STYLE)
    assert (m.running, m.kv_blocks_total) == (1, None)
    assert m.kv_usage == pytest.approx(0.4)


def test_the_new_kv_gauge_wins_when_a_server_publishes_both() -> None:
    """Test that the current name takes precedence over the deprecated one."""
    both = OLD_STYLE + 'vllm:kv_cache_usage_perc{model_name="m"} 0.9\n'
    assert read_engine_metrics(both).kv_usage == pytest.approx(0.9)


def test_sim_engine_series_give_clock_energy_and_model_time() -> None:
    """Test that greenserve:* series are read and mark the server as clock-controllable."""
    text = (
        'greenserve:sm_clock_mhz{model_name="m"} 1005.0\n'
        'greenserve:energy_joules_total{model_name="m"} 12.5\n'
        'greenserve:model_time_seconds{model_name="m"} 3.0\n'
        "garbage line\nvllm:num_requests_running{} NaN\n"
    )
    m = read_engine_metrics(text)
    assert (m.clock_mhz, m.energy_j, m.model_time_s, m.running) == (1005.0, 12.5, 3.0, 0)
    assert m.clock_control
