# One file drives lint and tests. `make test` is what CI runs (.ci/run).
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)/build/collections
export PIP_DISABLE_PIP_VERSION_CHECK := 1
# Each pytest run its own temp dir in this checkout (emptied when it starts): no numbered dirs under
# /tmp/pytest-of-<user>, whose cleanup in pytest itself leaves a scandir iterator open now and then, a
# ResourceWarning our warnings-as-errors turn into a failed run after every test passed.
BASETEMP = --basetemp=$(CURDIR)/build/pytest/$@

.PHONY: test deps unit lab-test matrix sanity lint nox docs-site bench demo demo-doctor fakes clean venv collection-link molecule kube kube-build kube-node prom lab fleet-bench ee ee-context

# Every stage CI runs, each timed into out/stages.tsv (.ci/run prints the table at the end). The stages
# that mostly wait (a real API server, Prometheus, containers booting systemd, the real kubelet node) run
# beside those that compute, in two lanes (';'); the real kubelet node's follows Molecule, never beside it
# (podman's iptables rules), and kube-build takes a lock, so both lanes may ask for it
# (hack/run-stages.sh; GPUOPS_SERIAL=1: one at a time).
STAGES_FIRST := deps venv
STAGES_COMPUTE := unit lab-test matrix sanity lint nox
STAGES_BESIDE := kube-build kube prom; molecule kube-node
STAGES_LAST :=
test: ## everything CI runs, stage by stage (times in out/stages.tsv; `hack/stage.sh --table`)
	@MAKE="$(MAKE)" hack/run-stages.sh "$(STAGES_FIRST)" "$(STAGES_COMPUTE)" "$(STAGES_BESIDE)" "$(STAGES_LAST)"; rc=$$?; hack/stage.sh --table; exit $$rc

deps: ## check (as root: install) the Debian packages the tests need, before anything runs
	@if [ "$$(id -u)" = 0 ]; then hack/check-deps.sh --install; else hack/check-deps.sh; fi

venv: $(STAMP)
$(STAMP): requirements-dev.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet --no-compile -r requirements-dev.txt
	hack/compile-venv.sh $(BIN)/python
	touch $@

collection-link:
	@mkdir -p build/collections/ansible_collections/gpuops
	@ln -sfn $(CURDIR) build/collections/ansible_collections/gpuops/fleet

unit: venv collection-link ## pytest: codec (with the Go oracle), planner, inventory (fake NVML), faults, modules through ansible-playbook
	@mkdir -p build/pytest
	GPUOPS_REQUIRE_GO_ORACLE=1 $(BIN)/python -m pytest -p no:randomly $(BASETEMP) tests/unit

lab-test: venv collection-link fakes ## the lab: site.yml twice (repair, then changed=0), each node's installed guard, under ansible-runner as AWX runs it, and the fleet page in a real browser (chromium)
	@mkdir -p build/pytest
	GPUOPS_REQUIRE_BROWSER=1 $(BIN)/python -m pytest -p no:randomly $(BASETEMP) tests/lab tests/runner

# The other ansible-core lines that requires_ansible claims (cached venvs in ~/.cache/gpuops/venvs;
# 2.20 and 2.21 on pyenv's Python 3.12 and 3.13): module tests through ansible-playbook and the lab
# on each, MATRIX_JOBS (2) lines at a time.
ANSIBLE_MAJORS ?= 9 10 11 13 14
matrix: venv collection-link fakes ## ansible-core 2.16, 2.17, 2.18, 2.20, 2.21: module tests and the lab
	PYTHON=$(PYTHON) hack/ansible-matrix.sh $(ANSIBLE_MAJORS)

# ansible-test sanity (hack/sanity.sh: a copy of the files git knows about, kubernetes.core beside
# it): every test on the newest ansible-core (2.21, Python 3.13: the newest rules, which users'
# lint meets first), then on the main venv's 2.19 only the tests that can give another answer
# there (hack/sanity-tests.py: their code or tool pins differ, or they run the core itself).
sanity: venv ## ansible-test sanity: all on ansible-core 2.21, what can differ on 2.19
	hack/sanity.sh 2.21 "$$(PYTHON=$(PYTHON) hack/ansible-matrix.sh --venv 14)"
	hack/sanity.sh 2.19 $(BIN)/python --differing-from "$$(PYTHON=$(PYTHON) hack/ansible-matrix.sh --venv 14)"

lint: venv collection-link ## ansible-lint (production profile), the changelog fragments, mypy on the annotated pure cores
	$(BIN)/ansible-lint --offline
	$(BIN)/antsibull-changelog lint
	$(BIN)/python -m mypy

# antsibull-nox (noxfile.py, antsibull-nox.toml): ruff and yamllint, antsibull-docs' docs lint,
# no-unwanted-files and the action groups, the build and galaxy-importer's import of the tarball.
# Its session venvs are cached in NOX_ENVDIR; kubernetes.core (docs refs) comes from the main venv.
# antsibull-nox only warns on an importer ERROR line: here it fails the stage.
NOX_ENVDIR ?= $(HOME)/.cache/gpuops/nox
NOX = ANSIBLE_COLLECTIONS_PATH=$(CURDIR)/build/collections:$$($(BIN)/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') \
	PATH=$(CURDIR)/$(BIN):$$PATH $(BIN)/nox --envdir $(NOX_ENVDIR) --reuse-venv=yes
nox: venv collection-link ## the Ansible ecosystem's collection checks (antsibull-nox): lint, docs, build and import
	@mkdir -p out
	set -o pipefail; $(NOX) 2>&1 | tee out/nox.log
	@if grep -q 'Galaxy importer emitted' out/nox.log; then echo "galaxy-importer logged ERROR lines (out/nox.log)"; exit 1; fi

docs-site: venv collection-link ## the docs site (antsibull-docs, Sphinx) in build/docsite/html (make nox builds it too)
	$(NOX) -s docs-site

# A real kube-apiserver/controller-manager/scheduler, with kubelet and kubectl (built once from
# Debian's kubernetes source in one make call, cached in ~/.cache/gpuops) with SIMULATED nodes: the
# roles' integration tests.
kube-build:
	hack/kube-cluster.sh build

kube: venv collection-link fakes kube-build ## device_plugin role against a real API server (SIMULATED nodes)
	@mkdir -p build/pytest
	$(BIN)/python -m pytest -p no:randomly $(BASETEMP) tests/kube

# A REAL kubelet v1.20.2 + containerd node (hack/kube-node.sh) joined to its own control plane, with
# SIMULATED GPUs (fake NVML, a fake device plugin over kubelet's real gRPC API): field report 000's
# story with both strategies, the boot guard before kubelet. Serial: one node per machine. Skips with
# the reason where the machine cannot run it (root, cgroup v1, containerd), except under
# GPUOPS_REQUIRE_KUBE_NODE=1 (.ci/run), where that fails.
kube-node: venv collection-link fakes kube-build ## field report 000's story and the boot guard on a REAL kubelet node (SIMULATED GPUs)
	@mkdir -p build/pytest
	$(BIN)/python -m pytest -p no:randomly $(BASETEMP) tests/knode

prom: venv collection-link fakes kube-build ## gpu_monitoring's rules and gpu_memory_report against a real Prometheus and node_exporter (Debian's) on loopback
	@mkdir -p build/pytest
	$(BIN)/python -m pytest -p no:randomly -s $(BASETEMP) tests/prometheus

# The lab's nodes run pynvml from this venv: compile it as pip (without --no-compile) or a distribution package
# does on a real node, or every module run on a lab node recompiles its 6,000 lines (~50 ms).
fakes: venv
	$(BIN)/python -c 'import sys; sys.path.insert(0, "tests/fakes"); import fakenode; fakenode.build_lib("build/fakes")'
	$(BIN)/python -c 'import compileall, pynvml, sys; sys.exit(not compileall.compile_file(pynvml.__file__, quiet=1))'

demo: venv collection-link fakes ## the main job on the lab default (SIMULATED GPUs)
	$(BIN)/ansible-playbook -i lab/inventory.yml lab/setup.yml
	$(BIN)/ansible-playbook -i lab/inventory.yml playbooks/site.yml -e gpuops_report_dir=$(CURDIR)/out/report

# the control plane is built the first time (about 8 minutes on 2 cores, its progress shown), then reused from the cache
demo-doctor: venv collection-link fakes kube-build ## the GPU doctor: a fault on a SIMULATED GPU, event, quarantine, reset, release, the fleet page
	$(BIN)/python lab/doctor.py --out $(CURDIR)/out/doctor

# N lab nodes with SIMULATED GPUs (a realistic mix) under out/fleet: make lab NODES=200
NODES ?= 200
lab: venv fakes ## a lab fleet of NODES nodes (SIMULATED GPUs) in out/fleet/
	$(BIN)/python lab/fleet.py --nodes $(NODES) --out out/fleet

fleet-bench: venv collection-link fakes ## ping vs site.yml's check stage vs the full repair on 50, 100, 200 lab nodes (figures, not a test)
	$(BIN)/python benchmarks/fleet.py

# The execution environment (execution-environment.yml): the build context (checked by make unit),
# or the image with podman (a Debian base image built locally; registries are unreachable here).
ee-context: venv ## ansible-builder create into build/ee/context
	BIN=$(BIN) hack/ee.sh context

ee: venv ## build the execution environment image localhost/gpuops-fleet-ee:latest with podman
	CONTAINERS_CONF=$(CURDIR)/tests/molecule/containers.conf BIN=$(BIN) hack/ee.sh build

bench: venv collection-link ## speed figures (not a test)
	$(BIN)/python benchmarks/bench.py

clean:
	rm -rf build out .pytest_cache

# Molecule on real systemd (podman). Needs podman, runc, debootstrap (.ci/run installs them).
SCENARIO ?= --all
MOLECULE_ENV := CONTAINERS_CONF=$(CURDIR)/tests/molecule/containers.conf PATH=$(CURDIR)/$(BIN):$$PATH
molecule: venv collection-link fakes ## Molecule scenarios: healthy, replaced_gpu, replaced_gpu_live, operator_driver, corrupt, no_driver, metrics
	$(MOLECULE_ENV) hack/molecule-image.sh
	$(MOLECULE_ENV) $(BIN)/molecule test $(if $(filter --all,$(SCENARIO)),--all,-s $(SCENARIO))
