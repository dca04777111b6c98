# Every target that runs code depends on `setup`, which builds the environment from
# nothing on a fresh machine: a .venv in the repo (torch pinned first, CPU wheel), the
# pinned requirements, the project itself (editable), a Java runtime for METEOR 1.5, and
# the NLTK lexicon data used by the dictionary-word filter.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
LEXICON_STAMP := $(VENV)/.lexicon
DEMO_OUT ?= demo_out
DEMO_ARGS ?=
# Test processes (pytest-xdist), each test file kept in one: 2 fits the 2-core CI machine
# (about 3 GB peak each); `make test TEST_WORKERS=0` runs in one process.
TEST_WORKERS ?= 2
XDIST := $(if $(filter 0,$(TEST_WORKERS)),-p no:xdist,-n $(TEST_WORKERS) --dist loadfile)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-fast data demo bench lint breaks mutate clean

setup: $(STAMP) $(LEXICON_STAMP)

$(STAMP): requirements.txt setup.py
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -r requirements.txt
	$(PY) -m pip install --quiet --no-deps --no-build-isolation -e .
	command -v java >/dev/null || { apt-get update -qq && apt-get install -y -qq --no-install-recommends default-jre-headless; }
	touch $@

# Real NLTK data is used when it is installed; otherwise Debian's wordnet-base (installed
# here when missing) and the english-words web2 list are assembled into an nltk_data folder.
$(LEXICON_STAMP): $(STAMP) transforms/wes/lexicon.py transforms/wes/lexicon_assembly.py
	$(PY) -m transforms.wes.lexicon --has-real-data || test -d /usr/share/wordnet || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends wordnet-base; }
	$(PY) -m transforms.wes.lexicon --ensure
	touch $@

test: setup
	$(PY) -m pytest -q $(XDIST) tests

# The suite without the tests marked slow (pipelines, models, JVMs): 1 to 3 minutes on 2 cores.
test-fast: setup
	$(PY) -m pytest -q $(XDIST) -m "not slow" tests

# The data the demo, the tests and the benchmarks read (transforms/data/registry.json),
# fetched into the data cache (QA_EVAL_DATA_DIR, else $XDG_CACHE_HOME/qa-eval or
# ~/.cache/qa-eval) and checked by SHA-256; files already there are kept. A mirror (a
# folder or base URL with the files under the same paths) replaces the original hosts:
# QA_EVAL_DATA_MIRROR, by default ../shared/data where that folder exists.
# `make data DATA_SETS='squad-dev stsb-train'` fetches some (names, or demo/tests/bench).
DATA_SETS ?= all
SHARED_DATA := $(abspath $(CURDIR)/../shared/data)
export QA_EVAL_DATA_MIRROR ?= $(if $(wildcard $(SHARED_DATA)),$(SHARED_DATA))

data: setup
	$(PY) -m pipelines.fetch_data fetch $(DATA_SETS)

# The demo reads its data from the cache that `data` fills (its own first step checks it).
demo: DATA_SETS = demo
demo: setup data
	$(PY) -m pipelines.demo --output $(DEMO_OUT) $(DEMO_ARGS)

bench: setup
	$(PY) -m tests.bench.run_all

lint: setup
	$(VENV)/bin/ruff check pipelines transforms tests

# Deliberate breaks of the production code that the tests must catch: each
# tests/breaks/<name>.patch (a `git diff` under a header naming the change and its tests)
# is applied to a copy of the working tree and its tests run there; the target fails
# when a break's tests all pass (or none runs) or its patch no longer applies. One line
# per break: 5-10 s each on 2 cores, about 40 s for one whose test starts a Dask cluster.
# `make breaks BREAK_NAMES='name ...'` runs some of them.
BREAK_NAMES ?=
breaks: setup
	$(PY) -m tests.breaks.run $(BREAK_NAMES)

# Mutation testing of the modules where a wrong answer would be silent (setup.cfg's
# [mutmut] section lists them and the tests that cover them). Not part of `test`: about
# 60-80 minutes on 2 cores (the first seven modules about 27; ownership.py with
# run_model_metrics.py 33, bootstrap.py 30 on one worker, predictors.py 9, squad_pairs.py
# 7, each run on its own on a shared machine); run it when those modules or their tests
# change, and record the killed shares in docs/benchmarks.md.
# `make mutate MUTANTS='transforms.metrics.squad.*'` mutates one module (the first, full
# test run that maps tests to functions still runs).
MUTMUT_VENV := .venv-mutmut
MUTMUT_STAMP := $(MUTMUT_VENV)/.installed
MUTATE_JOBS ?= 2
MUTANTS ?=

$(MUTMUT_STAMP): $(STAMP) requirements-mutate.txt
	test -x $(MUTMUT_VENV)/bin/python || $(PY) -m venv $(MUTMUT_VENV)
	$(PY) -c "import sysconfig; print(sysconfig.get_paths()['purelib'])" \
	  > "$$($(MUTMUT_VENV)/bin/python -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")/project-venv.pth"
	$(MUTMUT_VENV)/bin/python -m pip install --quiet -r requirements-mutate.txt
	touch $@

# mutants/ is made before mutmut starts: it must exist when Python starts, or the
# PYTHONPATH entry (which Beam's worker processes inherit) is cached as missing. The tests
# run from mutants/, where tests/conftest.py would look for the real data one folder too
# deep: QA_EVAL_SHARED_DATA names ../shared/data, as `make breaks` does.
mutate: $(MUTMUT_STAMP) $(LEXICON_STAMP)
	rm -rf mutants && mkdir mutants
	QA_EVAL_SHARED_DATA=$${QA_EVAL_SHARED_DATA:-$(abspath $(CURDIR)/../shared/data)} \
	PYTHONPATH=$(CURDIR)/mutants nice -n 10 $(MUTMUT_VENV)/bin/mutmut run --max-children $(MUTATE_JOBS) $(MUTANTS)
	$(MUTMUT_VENV)/bin/python -m tests.mutation_summary --mutmut $(MUTMUT_VENV)/bin/mutmut --survivors

clean:
	rm -rf $(VENV) $(MUTMUT_VENV) mutants $(DEMO_OUT) bench_out
