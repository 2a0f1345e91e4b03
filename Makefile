# mpsteer: `make demo` and `make test` install what is missing, build, and
# do their job. `make bench` writes benchmark JSON to results/bench/.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/mpsteer
OUT   ?= results

.PHONY: all deps build generate test demo bench clean fuzz

all: build

deps:
	@scripts/deps.sh

generate: deps
	$(GO) generate ./...

build: generate
	$(GO) build -o $(BIN) ./cmd/mpsteer

# As root, every privileged test must run: a skip is a failure there
# (MPSTEER_REQUIRE_PRIVILEGED), so a broken setup cannot pass green.
test: build
	MPSTEER_BIN=$(CURDIR)/$(BIN) $(if $(filter 0,$(shell id -u)),MPSTEER_REQUIRE_PRIVILEGED=1) $(GO) test -count=1 -timeout 30m ./...

demo: build
	$(BIN) lab run scenarios/demo.yaml --out $(OUT)/demo

bench: build
	$(BIN) bench --out $(OUT)/bench

clean:
	rm -rf bin

# Every Go fuzz target, FUZZTIME each (the seed corpora also run in `make
# test`, as ordinary tests). A crash is written to the package's
# testdata/fuzz/ and fails the run: commit it as a regression test.
FUZZTIME ?= 30s
fuzz: build
	@set -e; for pkg in $$($(GO) list ./...); do \
		for fz in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
			echo "fuzz: $$pkg $$fz ($(FUZZTIME))"; \
			MPSTEER_BIN=$(CURDIR)/$(BIN) $(GO) test -run XXX -fuzz "^$$fz\$$" -fuzztime $(FUZZTIME) $$pkg; \
		done; \
	done
