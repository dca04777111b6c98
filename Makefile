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
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
export TOKENIZERS_PARALLELISM := false

.PHONY: setup test test-fast demo bench lint clean

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
$(LEXICON_STAMP): $(STAMP) transforms/wes/lexicon.py
	$(PY) -m transforms.wes.lexicon --has-real-data || test -d /usr/share/wordnet || \
	  { apt-get update -qq && apt-get install -y -qq --no-install-recommends wordnet-base; }
	$(PY) -m transforms.wes.lexicon --ensure
	touch $@

test: setup
	$(PY) -m pytest -q tests

# The suite without the tests marked slow (pipelines, models, JVMs): 1 to 3 minutes on 2 cores.
test-fast: setup
	$(PY) -m pytest -q -m "not slow" tests

demo: setup
	$(PY) -m pipelines.demo --output $(DEMO_OUT) $(DEMO_ARGS)

bench: setup
	$(PY) -m tests.bench.run_all

lint: setup
	$(VENV)/bin/ruff check pipelines transforms tests

clean:
	rm -rf $(VENV) $(DEMO_OUT) bench_out
