"""Loading a checkpoint never runs code that came with it, and every error about a model
folder names the folder or the file."""

from __future__ import annotations

import ast
import json
import logging
import re
import runpy
import shutil
from pathlib import Path

import pytest
import torch

from tests.conftest import REPO
from tests.models.checkpoints import copy_checkpoint, write_malicious_pickle
from transforms.metrics.model_metrics import SASMetric
from transforms.models import loading, torch_models

CROSS = "AutoModelForSequenceClassification"
_SOURCES = [p for d in ("transforms", "pipelines") for p in sorted((REPO / d).rglob("*.py"))]


def _calls(path: Path, name: str):
    """Every call of `<anything>.name(...)` or `name(...)` in a source file."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Call):
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
            if called == name:
                yield node


def _keyword(call: ast.Call, name: str):
    value = next((k.value for k in call.keywords if k.arg == name), None)
    return value.value if isinstance(value, ast.Constant) else value


def test_every_from_pretrained_passes_trust_remote_code_false():
    """Each loading call says it, visibly; nothing anywhere in the repo sets it True."""
    calls = [(p, c) for p in _SOURCES for c in _calls(p, "from_pretrained")]
    assert len(calls) >= 3  # tokenizer, model, training's model
    missing = [f"{p.relative_to(REPO)}:{c.lineno}" for p, c in calls
               if _keyword(c, "trust_remote_code") is not False]
    assert missing == []
    everywhere = [p for d in ("transforms", "pipelines", "tests") for p in (REPO / d).rglob("*.py")]
    assert [str(p) for p in everywhere
            if re.search(r"trust_remote_code\s*=\s*True", p.read_text(encoding="utf-8"))] == []


def test_no_unrestricted_unpickling_in_the_product():
    """No pickle.load(s)/Unpickler, and torch.load only with weights_only=True."""
    found = [f"{p.relative_to(REPO)}:{c.lineno}" for p in _SOURCES
             for name in ("load", "loads", "Unpickler") for c in _calls(p, name)
             if isinstance(c.func, ast.Attribute) and getattr(c.func.value, "id", "") in
             ("pickle", "cPickle", "dill", "cloudpickle", "joblib")]
    found += [f"{p.relative_to(REPO)}:{c.lineno}" for p in _SOURCES for c in _calls(p, "load")
              if isinstance(c.func, ast.Attribute) and getattr(c.func.value, "id", "") == "torch"
              and _keyword(c, "weights_only") is not True]
    assert found == []


_MODULE = "open({marker!r}, 'w').write('ran')\nclass {cls}:\n    pass\n"


def _with_custom_code(src: str, out: Path, marker: Path, model_type: str | None) -> Path:
    """A copy of `src` whose config.json and tokenizer_config.json map the Auto classes to
    modules in the folder that write `marker` when imported (what `trust_remote_code`
    would run)."""
    folder = copy_checkpoint(src, out)
    for module, cls in (("configuration_evil", "EvilConfig"), ("modeling_evil", "EvilModel"),
                        ("tokenization_evil", "EvilTokenizer")):
        (folder / f"{module}.py").write_text(_MODULE.format(marker=str(marker), cls=cls))
    config = json.loads((folder / "config.json").read_text())
    config["auto_map"] = {"AutoConfig": "configuration_evil.EvilConfig",
                          "AutoModel": "modeling_evil.EvilModel",
                          CROSS: "modeling_evil.EvilModel"}
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    tok["auto_map"] = {"AutoTokenizer": ["tokenization_evil.EvilTokenizer", None]}
    if model_type is not None:  # a type transformers does not know: only the code has it
        config["model_type"] = model_type
        tok.pop("tokenizer_class")
    (folder / "config.json").write_text(json.dumps(config))
    (folder / "tokenizer_config.json").write_text(json.dumps(tok))
    return folder


def test_custom_code_in_a_checkpoint_is_not_run(cross_encoder_path, tmp_path):
    """A known model_type with an auto_map: the library's own classes load it."""
    marker = tmp_path / "pwned"
    folder = _with_custom_code(cross_encoder_path, tmp_path / "ckpt", marker, None)
    spec = loading.ModelSpec.of(str(folder), device="cpu")
    model = torch_models.load_model(spec, CROSS)
    tokenizer = loading.load_tokenizer(spec)
    assert type(model).__name__ == "BertForSequenceClassification"
    assert type(tokenizer).__module__.startswith("transformers.")
    assert not marker.exists()
    runpy.run_path(str(folder / "modeling_evil.py"))  # the payload was live
    assert marker.read_text() == "ran"


def test_a_checkpoint_that_needs_its_own_code_is_refused(cross_encoder_path, tmp_path):
    marker = tmp_path / "pwned"
    folder = _with_custom_code(cross_encoder_path, tmp_path / "ckpt", marker, "evil-bert")
    spec = loading.ModelSpec.of(str(folder), device="cpu")
    with pytest.raises(ValueError, match=f"{re.escape(str(folder))}.*custom code"):
        torch_models.load_model(spec, CROSS)
    with pytest.raises(ValueError, match=f"{re.escape(str(folder))}.*custom code"):
        loading.load_tokenizer(spec)
    assert not marker.exists()


def test_safetensors_weights_win_over_a_planted_pickle(cross_encoder_path, tmp_path):
    marker = tmp_path / "pwned"
    folder = copy_checkpoint(cross_encoder_path, tmp_path / "ckpt")
    write_malicious_pickle(folder / "pytorch_model.bin", marker)
    assert loading.safe_load_kwargs(str(folder)) == {"weights_only": True, "use_safetensors": True}
    torch_models.load_model(loading.ModelSpec.of(str(folder), device="cpu"), CROSS)
    assert not marker.exists()


def test_pickle_weights_load_only_through_the_restricted_unpickler(cross_encoder_path, tmp_path,
                                                                   caplog):
    """A .bin-only folder loads (plain tensors); a malicious .bin is refused, not run."""
    spec = loading.ModelSpec.of(cross_encoder_path, device="cpu")
    reference = torch_models.load_model(spec, CROSS)
    plain = copy_checkpoint(cross_encoder_path, tmp_path / "plain")
    (plain / "model.safetensors").unlink()
    torch.save(reference.state_dict(), plain / "pytorch_model.bin")
    with caplog.at_level(logging.WARNING):
        model = torch_models.load_model(loading.ModelSpec.of(str(plain), device="cpu"), CROSS)
    assert "only pickle-format weights" in caplog.text
    for name, tensor in reference.state_dict().items():
        assert torch.equal(model.state_dict()[name], tensor), name

    marker = tmp_path / "pwned"
    evil = copy_checkpoint(cross_encoder_path, tmp_path / "evil")
    (evil / "model.safetensors").unlink()
    write_malicious_pickle(evil / "pytorch_model.bin", marker)
    with pytest.raises(ValueError, match=f"cannot read the weights of {re.escape(str(evil))}"):
        torch_models.load_model(loading.ModelSpec.of(str(evil), device="cpu"), CROSS)
    assert not marker.exists()


def _write(name: str, data: bytes):
    return lambda folder: (folder / name).write_bytes(data)


def _remove(*names: str):
    return lambda folder: [(folder / n).unlink(missing_ok=True) for n in names]


def _truncate(name: str):
    return lambda folder: (folder / name).write_bytes((folder / name).read_bytes()[:100])


def _config(folder):
    return loading.ModelSpec.of(str(folder)).config()


def _sas(folder):
    return SASMetric(model=str(folder))


def _model(folder):
    return torch_models.load_model(loading.ModelSpec.of(str(folder), device="cpu"), CROSS)


def _tokenizer(folder):
    return loading.load_tokenizer(loading.ModelSpec.of(str(folder)))


def _signature(folder):
    return loading.ModelSpec.of(str(folder)).signature_fields()


@pytest.mark.parametrize("break_it, load, names, message", [
    (_write("config.json", b"{not json"), _config, "config.json", "cannot read the model config"),
    (_write("config.json", b"{not json"), _sas, "config.json", "cannot read the model config"),
    (_write("config.json", b"{not json"), _model, "config.json", "cannot read the model config"),
    (_write("config.json", b"[1, 2]"), _config, "config.json", "is not a JSON object"),
    (_remove("config.json"), _config, "", "has no config.json"),
    (_remove("config.json"), _model, "", "has no config.json"),
    (_remove("model.safetensors"), _sas, "", "has no model weights"),
    (_remove("model.safetensors"), _model, "", "has no model weights"),
    (_truncate("model.safetensors"), _model, "", "cannot read the weights of"),
    (_write("tokenizer.json", b"garbage"), _tokenizer, "tokenizer.json", "cannot read the tokenizer file"),
    (_write("tokenizer_config.json", b"garbage"), _tokenizer, "tokenizer_config.json", "cannot read"),
    (_write("tokenizer_config.json", b"garbage"), _signature, "tokenizer_config.json", "cannot read"),
    (_write("tokenizer.json", b'{"added_tokens": [], "model": {"type": "Nope"}}'), _tokenizer,
     "", "cannot load the tokenizer of"),
    (_write("tokenizer.json", json.dumps({"version": "1.0", "added_tokens": [], "model": {
        "type": "BPE"}, **dict.fromkeys(("normalizer", "pre_tokenizer", "post_processor",
                                        "decoder", "truncation", "padding"))}).encode()),
     _tokenizer, "", "has no vocabulary"),
    (_remove("tokenizer.json", "vocab.txt"), _tokenizer, "", "has no vocabulary"),
], ids=["config-not-json", "sas-config-not-json", "load-config-not-json", "config-a-list",
        "no-config", "load-no-config", "sas-no-weights", "load-no-weights", "truncated-weights",
        "tokenizer-not-json", "tokenizer-config-not-json", "signature-tokenizer-config",
        "tokenizer-unparsable", "empty-vocabulary", "no-vocabulary"])
def test_errors_about_a_model_folder_name_it(cross_encoder_path, tmp_path, break_it, load,
                                             names, message):
    folder = copy_checkpoint(cross_encoder_path, tmp_path / "ckpt")
    break_it(folder)
    with pytest.raises(ValueError) as caught:
        load(folder)
    text = str(caught.value)
    assert str(folder / names if names else folder) in text
    assert message in text


def test_a_missing_folder_keeps_its_own_message(tmp_path):
    shutil.rmtree(tmp_path)
    with pytest.raises(ValueError, match=f"model directory '{re.escape(str(tmp_path))}' does not"):
        loading.ModelSpec.of(str(tmp_path))
