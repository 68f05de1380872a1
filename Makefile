# SPDX-License-Identifier: Apache-2.0
# shimwalk: `make demo` shows a shim at work, `make test` checks everything. Both install what
# they need through scripts/deps.sh (run them as root on Debian).

GO       ?= go
BIN      := bin
STEPS    := $(sort $(wildcard steps/[0-9][0-9]-*))
STEP_BINS := $(foreach s,$(STEPS),$(BIN)/containerd-shim-step$(shell basename $(s) | cut -c1-2)-v2)
TESTFLAGS ?= -count=1 -timeout 30m
STATICCHECK := $(shell $(GO) env GOPATH)/bin/staticcheck
# Empty when the toolchain no longer knows the experiment: see the shim's line in build.
SHIM_GOEXPERIMENT := $(shell GOEXPERIMENT=nogreenteagc $(GO) env GOEXPERIMENT >/dev/null 2>&1 && echo nogreenteagc)
SHIM_BUILD := CGO_ENABLED=0 GOEXPERIMENT=$(SHIM_GOEXPERIMENT) $(GO) build -ldflags '-s -w'
# Named explicitly so that exercise copies in work/ are never linted or tested as the project.
PKGS     := ./steps/... ./final/... ./tools/... ./docs/... ./bench/...

.PHONY: all build demo-build deps deps-demo demo lab-pod test lint unit exercises conformance e2e soak fuzz exercise exercise-list check stepdiff stepsame docs bench clean

all: build

build:
	@mkdir -p $(BIN)
	@for s in $(STEPS); do \
		n=$$(basename $$s | cut -c1-2); \
		$(GO) build -o $(BIN)/containerd-shim-step$$n-v2 ./$$s || exit 1; \
	done
# Static and stripped, as containerd builds its own shims (SHIM_CGO_ENABLED=0): one exec of the
# shim is a millisecond faster without the dynamic loader, and maps no libc. Without Go 1.26's
# Green Tea GC, while the toolchain still offers the choice, an idle shim holds 0.15 MiB less.
# See bench/NOTES.md.
	$(SHIM_BUILD) -o $(BIN)/containerd-shim-shimwalk-v2 ./final/cmd/containerd-shim-shimwalk-v2
	$(GO) build -o $(BIN)/shimctl ./final/cmd/shimctl
	@ls $(BIN)

# What make demo runs and no more: the final shim and shimctl, in one go build with the shim's
# flags, so that the two share every compiled package and a fresh machine compiles each once.
demo-build:
	@mkdir -p $(BIN)
	$(SHIM_BUILD) -o $(BIN)/ ./final/cmd/containerd-shim-shimwalk-v2 ./final/cmd/shimctl

deps:
	@./scripts/deps.sh

# Only runc and busybox-static: containerd 2.x, crun, criu and staticcheck are for the tests.
deps-demo:
	@./scripts/deps.sh demo

# The narrated walkthrough against the final shim (docs/workshop.md has its time on a fresh
# machine). make build adds the steps' shims; DEMO_SHIM=bin/containerd-shim-step03-v2 picks one.
demo: deps-demo demo-build
	@./scripts/demo.sh

# The workshop's pod lab: containerd 2.x with its CRI plugin and crictl run a pod of two
# containers on the final shim, which serves the whole pod (tools/labpod; its test runs it too).
# LABFLAGS=-explore keeps the pod until Enter, to look at it with crictl and ps.
lab-pod: deps build
	$(GO) run ./tools/labpod $(LABFLAGS)

# Everything CI checks: formatting, vet, staticcheck, every test, every workshop exercise both
# ways (its check fails on the stubbed step and passes on the real one), and containerd's own
# client suite with both shims (2 to 3 minutes per shim on 2 cores, 2 more per hung test).
test: deps lint unit exercises conformance

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
		if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(STATICCHECK) $(PKGS)

unit:
	$(GO) test $(TESTFLAGS) $(PKGS)

exercises:
	$(GO) run ./tools/exercise verify

# Regenerates what docs/ and the step READMEs generate: snippets, command output, diagrams
# from traced runs, step diffs and file-changes sections (go test ./docs checks them).
docs: deps build
	$(GO) test -count=1 ./docs -run . -update

# containerd v2.4.2's own integration/client suite, unmodified and offline, with
# containerd-shim-runc-v2 and with the final shim; fails when a test passes with the first and not
# with the second, and writes the table into docs/deploy.md. CONFORMANCEFLAGS go to
# `conformance run` (-run 'TestContainerExec' narrows it, -shim final reruns one side).
conformance: deps build
	./scripts/conformance.sh $(CONFORMANCEFLAGS)

# The final shim under containerd 1.6 and 2.x (part of unit too; this runs it alone).
e2e: deps
	$(GO) test $(TESTFLAGS) -v ./final/e2e ./final/shim/shimtest

# Load and leaks, long: 200 containers churned by 4 workers and 1000 execs through a grouped
# shim serving 20 containers (TestSoak's counts; `make test` runs it short). Then, when
# scripts/fuzz.sh is there, SOAK_FUZZTIME of fuzzing per target.
SOAK_FUZZTIME ?= 2m
soak: deps build
	SHIMWALK_SOAK=long $(GO) test -count=1 -timeout 30m -v -run '^TestSoak$$' ./final/e2e
	@if [ -x scripts/fuzz.sh ]; then ./scripts/fuzz.sh $(SOAK_FUZZTIME); \
	else echo "soak: no scripts/fuzz.sh, so no fuzzing"; fi

# Every fuzz target for FUZZTIME each (make test runs only their seed corpora).
FUZZTIME ?= 30s
fuzz:
	./scripts/fuzz.sh $(FUZZTIME)

# make exercise EX=04.2: a copy of the step with the exercise applied, in work/EX.
exercise:
	@test -n "$(EX)" || { echo "usage: make exercise EX=NN.N (make exercise-list shows them)"; exit 2; }
	$(GO) run ./tools/exercise make $(EX)

exercise-list:
	@$(GO) run ./tools/exercise list

# make check EX=04.2: runs the exercise's test against work/EX.
check:
	@test -n "$(EX)" || { echo "usage: make check EX=NN.N"; exit 2; }
	$(GO) run ./tools/exercise check $(EX)

# make stepdiff A=03 B=04: exactly what step B adds to step A, code only; READMES=1 includes the
# step READMEs, whose prose would otherwise be most of the diff.
stepdiff:
	@test -n "$(A)" -a -n "$(B)" || { echo "usage: make stepdiff A=NN B=MM [READMES=1]"; exit 2; }
	@diff -ruN $(if $(filter 1,$(READMES)),,-x README.md) $(wildcard steps/$(A)-*) $(wildcard steps/$(B)-*); true

# Code that must change together: files byte-identical across steps, and final/ functions whose
# step counterpart differs in a way tools/stepsame/known.txt does not explain (a fix made on one
# side only). Fails when there is one; go run ./tools/stepsame -update refreshes known.txt.
stepsame:
	@$(GO) run ./tools/stepsame -check

# The final shim against containerd-shim-runc-v2 under containerd 1.6 and 2.x, side by side (not
# part of test, which runs it once with the smallest counts). Writes bench/results/ and the
# README's Benchmarks section; BENCHFLAGS adds to or overrides the counts (bench -h lists them).
# The skeleton, step 02 built as the final shim is, is the floor of the transport both share.
bench: deps build
	$(GO) build -o $(BIN)/shimbench ./bench
	$(SHIM_BUILD) -o $(BIN)/skeleton/containerd-shim-step02-v2 ./steps/02-ttrpc
	$(BIN)/shimbench -shim $(BIN)/containerd-shim-shimwalk-v2 -skeleton $(BIN)/skeleton/containerd-shim-step02-v2 \
		-out bench/results -readme README.md $(BENCHFLAGS)

clean:
	rm -rf $(BIN) work
