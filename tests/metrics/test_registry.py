"""Metric names -> families, option validation, the extension point."""

from __future__ import annotations

import pytest

from transforms.metrics import registry
from transforms.metrics.bleu import BleuMetric
from transforms.metrics.cider import CiderMetric
from transforms.metrics.meteor import MeteorMetric
from transforms.metrics.rouge import RougeMetric
from transforms.metrics.squad import SquadMetric

LEXICAL = ["bleu1", "bleu2", "bleu3", "bleu4", "cider", "em", "f1", "meteor", "rougeL"]


def test_available_metrics_are_the_columns_of_their_families() -> None:
    names = registry.available_metrics()
    assert len(names) == len(set(names)) and set(LEXICAL) <= set(names)
    for name in names:
        assert name in registry.family_spec(registry.family_of(name)).columns


def test_one_instance_per_family_in_registry_order() -> None:
    metrics = registry.build_metrics(["bleu4", "f1", "bleu1", "rougeL", "em", "bleu4"])
    assert [type(m) for m in metrics] == [SquadMetric, BleuMetric, RougeMetric]
    assert [m.columns for m in metrics] == [("em", "f1"), ("bleu1", "bleu4"), ("rougeL",)]


def test_family_of() -> None:
    assert registry.family_of("bleu3") == "bleu"
    with pytest.raises(ValueError, match="available"):
        registry.family_of("bleu5")


def test_unknown_name_lists_available() -> None:
    with pytest.raises(ValueError) as err:
        registry.build_metrics(["bleu1", "blue4"])
    assert "['blue4']" in str(err.value)
    assert "available" in str(err.value) and "rougeL" in str(err.value)


@pytest.mark.parametrize("family", ["sas", "wes", "bem", "judge", "square", "kpqa_bleu1"])
def test_fine_tuned_families_without_a_checkpoint_say_how_to_get_one(family: str) -> None:
    with pytest.raises(ValueError, match=r"_model.*(train|python -m pipelines)"):
        registry.build_metrics([family])


def test_model_families_are_marked_and_accept_model_spec_options() -> None:
    model_names = ["bertscore", "bi_encoder", "sas", "wes", "bem", "judge", "square", "kpqa_bleu1",
                   "kpqa_rougeL", "kpqa_bertscore"]
    assert registry.families_of(model_names) == set(registry.model_families())
    assert not registry.families_of(LEXICAL) & set(registry.model_families())
    for family in registry.model_families():
        assert registry.MODEL_OPTIONS <= registry.family_spec(family).option_names
    (bi,) = registry.build_metrics(["bi_encoder"], {"bi_encoder": {"layer": 3}})
    assert "layer:3" in bi.signature()["bi_encoder"]
    with pytest.raises(ValueError, match="unknown options"):
        registry.build_metrics(["bi_encoder"], {"bi_encoder": {"idf": True}})


@pytest.mark.parametrize("names", [[], "bleu1"])
def test_bad_name_lists(names) -> None:
    with pytest.raises(ValueError):
        registry.build_metrics(names)


def test_options_reach_the_family() -> None:
    cider, meteor = registry.build_metrics(
        ["cider", "meteor"],
        {"cider": {"df_mode": "pooled", "sigma": 3}, "meteor": {"max_heap": "1G"},
         "bleu": {"tokenizer": "jar"}},  # a family not requested: ignored
    )
    assert isinstance(cider, CiderMetric) and cider.df_mode == "pooled" and cider.sigma == 3.0
    assert isinstance(meteor, MeteorMetric) and meteor.max_heap == "1G"


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"cidr": {}}, "unknown metric families"),
        ({"cider": {"dfmode": "pooled"}}, "unknown options"),
        ({"cider": {"df_mode": "global"}}, "df_mode"),
        ({"cider": {"sigma": 0}}, "sigma"),
        ({"cider": "pooled"}, "mapping"),
        ({"rouge": {"beta": -1}}, "beta"),
        ({"bleu": {"tokenizer": "nltk"}}, "tokenizer"),
        ({"meteor": {"multi_ref": "mean"}}, "multi_ref"),
        ({"meteor": {"max_heap": "lots"}}, "max_heap"),
        ({"meteor": {"jvm_options": "-Xss1m"}}, "jvm_options"),
    ],
)
def test_bad_options_fail_at_build_time(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        registry.build_metrics(["cider", "rougeL", "bleu1", "meteor"], options)


def test_register_family_extension_point(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_FAMILIES", dict(registry._FAMILIES))
    monkeypatch.setattr(registry, "_COLUMN_TO_FAMILY", dict(registry._COLUMN_TO_FAMILY))
    registry.register_family(registry.FamilySpec(
        "toy", ("toy_a", "toy_b"), "transforms.metrics.squad:SquadMetric", model_backed=True))
    assert "toy_a" in registry.available_metrics()
    with pytest.raises(ValueError, match="already registered"):
        registry.register_family(registry.FamilySpec("toy", ("toy_c",), "x:y"))
    with pytest.raises(ValueError, match="already registered"):
        registry.register_family(registry.FamilySpec("toy2", ("em",), "x:y"))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [({"columns": ()}, "no columns"), ({"factory": "nocolon"}, "module:attribute")],
)
def test_family_spec_validation(kwargs: dict, match: str) -> None:
    spec = {"family": "f", "columns": ("c",), "factory": "m:a"} | kwargs
    with pytest.raises(ValueError, match=match):
        registry.FamilySpec(**spec)


def test_every_metric_has_a_one_line_description() -> None:
    described = registry.describe_metrics()
    assert list(described) == registry.available_metrics()
    for name, text in described.items():
        assert text and "\n" not in text and "family" not in text, name
        assert text.endswith("[model]") == (
            registry.family_of(name) in registry.model_families()), name


def test_an_unknown_metric_names_the_closest() -> None:
    with pytest.raises(ValueError, match=r"did you mean: rogueL -> rougeL\?"):
        registry.build_metrics(["em", "rogueL"])
