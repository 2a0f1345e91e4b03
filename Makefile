# mpsteer: `make demo` and `make test` install what is missing, build, and
# do their job. `make bench` writes benchmark JSON to results/bench/;
# `make reproduce` runs every paper experiment into results/reproduce/.
# `make build` needs neither root nor clang when the committed BPF objects
# are current (scripts/bpf-generate.sh). `make install` / `make uninstall`
# put the daemon on a systemd host; `make deb` packages the same files.
SHELL := /bin/bash
GO    ?= go
BIN   := bin/mpsteer
OUT   ?= results
# Rounds per experiment for `make reproduce` (each variant runs RUNS times).
RUNS  ?= 5

# Where `make install` puts things (the .deb uses PREFIX=/usr).
PREFIX     ?= /usr/local
BINDIR     ?= $(PREFIX)/bin
MANDIR     ?= $(PREFIX)/share/man
DOCDIR     ?= $(PREFIX)/share/doc/mpsteer
UNITDIR    ?= $(PREFIX)/lib/systemd/system
SYSCONFDIR ?= /etc
DESTDIR    ?=
# Where man pages and the package are made; BUILD_DEPS= uses the binary
# BIN as it is (the tests package the binary they test).
BUILDDIR   ?= build
BUILD_DEPS ?= build

# 0.1.0, and the commit when built from a git checkout.
VERSION  ?= $(shell cat VERSION)$(shell git rev-parse --short HEAD 2>/dev/null | sed 's/^/+git/')
DEB_ARCH ?= $(shell $(GO) env GOARCH)
LDFLAGS  := -X main.version=$(VERSION)

.PHONY: all deps build generate test test-kernels kernels-doc docs docs-check soak fuzz demo bench reproduce clean man install uninstall deb

all: build

deps:
	@scripts/deps.sh

# Always regenerates the BPF objects (needs clang, llvm, bpftool: make deps).
generate: deps
	$(GO) generate ./...

# Regenerates the BPF objects only where the toolchain is installed;
# otherwise builds with the committed ones (and refuses when BPF sources
# changed since the last commit, which only clang can compile).
build:
	@scripts/bpf-generate.sh
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/mpsteer

# As root, every privileged test must run: a skip is a failure there
# (MPSTEER_REQUIRE_PRIVILEGED), so a broken setup cannot pass green. The
# documents' figures are checked against their data first (docs-check).
# Then, as root, the kernel matrix (test-kernels); as another user it is
# skipped, as the privileged tests are.
test: deps build docs-check
	@status=0; \
	MPSTEER_BIN=$(CURDIR)/$(BIN) $(if $(filter 0,$(shell id -u)),MPSTEER_REQUIRE_PRIVILEGED=1) $(GO) test -count=1 -timeout 30m ./... || status=1; \
	if [ "$$(id -u)" = 0 ]; then scripts/kernels/run.sh || status=1; \
	else echo "test-kernels: skipped (needs root)"; fi; \
	exit $$status

# The privileged functional tests (scripts/kernels/tests.txt) on each
# kernel of the matrix: Debian 12's 6.1, its backports' 6.12 and Debian
# 13's kernel, each booted with virtme-ng under qemu (software emulation;
# the kernels are downloaded once into $$MPSTEER_KERNEL_CACHE, default
# /var/lib/mpsteer/kernels), and the host's kernel natively. One line per
# kernel, results in $(OUT)/kernels/VERSION.json; exits non-zero when a
# kernel has a failed test. Needs root. MPSTEER_KERNELS=debian12,host
# runs a part.
test-kernels: deps build
	MPSTEER_KERNEL_RESULTS=$(abspath $(OUT))/kernels scripts/kernels/run.sh

# docs/kernels.md from the last test-kernels' results, which are kept in
# docs/data/kernels/ (internal/kernelmatrix's test checks the two agree).
kernels-doc:
	rm -rf docs/data/kernels && mkdir -p docs/data/kernels && cp $(OUT)/kernels/*.json docs/data/kernels/
	$(GO) run ./cmd/kernelmatrix doc -in docs/data/kernels -out docs/kernels.md

# Every table, figure and paper quote of README.md and docs/results.md is
# rendered from docs/data (docs/figures.yaml, docs/papers.yaml): `make docs`
# writes them; `make docs-check` changes nothing and fails, naming each
# figure, when the text is not what the data give, when a data file is
# missing or has no provenance, or when a number is typed into the text.
docs: build
	$(BIN) docs render

docs-check: build
	$(BIN) docs render --check

# The long fault, load and hostile-input cases (internal/reliability; make
# test runs their short versions): one JSON record per case in
# $(OUT)/soak/, then docs/reliability.md's table is rendered from them
# (also when a case failed: its record says what was lost; make fails).
soak: deps build
	rm -rf $(OUT)/soak
	@export MPSTEER_BIN=$(CURDIR)/$(BIN) MPSTEER_SOAK=1 MPSTEER_SOAK_OUT=$(abspath $(OUT))/soak $(if $(filter 0,$(shell id -u)),MPSTEER_REQUIRE_PRIVILEGED=1); \
	status=0; \
	$(GO) test -count=1 -p 1 -timeout 60m ./internal/reliability || status=1; \
	$(GO) test -count=1 -run 'TestRandomTruncatedPackets' ./internal/datapath || status=1; \
	MPSTEER_SOAK_DOC=$(CURDIR)/docs/reliability.md $(GO) test -count=1 -run 'TestSoakDoc' ./internal/reliability || status=1; \
	echo "soak: records in $(OUT)/soak/, table in docs/reliability.md"; \
	exit $$status

# Every Go fuzz target under internal/ and cmd/, FUZZTIME each; fails
# naming a target that ran no input for more than 5 s or fewer than
# FUZZ_MIN_EXECS inputs in its time (go test -fuzz passes both). New
# inputs are not minimized (FUZZ_MINIMIZETIME=60s is go test's default):
# a worker minimizing reports nothing for up to that long.
FUZZTIME          ?= 30s
FUZZ_MIN_EXECS    ?= 1000
FUZZ_MINIMIZETIME ?= 0s
fuzz:
	GO=$(GO) $(GO) run ./cmd/fuzzrun -fuzztime $(FUZZTIME) -min-execs $(FUZZ_MIN_EXECS) -minimizetime $(FUZZ_MINIMIZETIME)

demo: deps build
	$(BIN) lab run scenarios/demo.yaml --out $(OUT)/demo

bench: deps build
	@scripts/allow-cc.sh
	$(BIN) bench --out $(OUT)/bench

# Every paper experiment (docs/papers.yaml) with `lab run`, one after
# another (hours), and one page over them: $(OUT)/reproduce/index.html.
# `mpsteer lab reproduce --keep` resumes; --index-only redraws the page.
reproduce: deps build
	@scripts/allow-cc.sh
	$(BIN) lab reproduce --runs $(RUNS) --out $(OUT)/reproduce

# Manual pages, from the command tree (what --help says).
man: $(BUILD_DEPS)
	rm -rf $(BUILDDIR)/man
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || date +%s) $(BIN) man --dir $(BUILDDIR)/man
	gzip -9nf $(BUILDDIR)/man/*.8

install: $(BUILD_DEPS) man
	install -D -m 0755 $(BIN) $(DESTDIR)$(BINDIR)/mpsteer
	install -d $(DESTDIR)$(UNITDIR) $(DESTDIR)$(MANDIR)/man8 $(DESTDIR)$(DOCDIR) $(DESTDIR)$(SYSCONFDIR)/mpsteer $(DESTDIR)$(SYSCONFDIR)/default
	sed 's|@BINDIR@|$(BINDIR)|g; s|@SYSCONFDIR@|$(SYSCONFDIR)|g' deploy/systemd/mpsteer.service.in > $(DESTDIR)$(UNITDIR)/mpsteer.service
	chmod 0644 $(DESTDIR)$(UNITDIR)/mpsteer.service
	install -m 0644 $(BUILDDIR)/man/*.8.gz $(DESTDIR)$(MANDIR)/man8/
	install -m 0644 LICENSE LICENSES/GPL-2.0-only.txt README.md docs/daemon.md docs/deploy.md $(DESTDIR)$(DOCDIR)/
	@# A config already there is the operator's: never overwritten.
	@for f in mpsteer/mpsteer.yaml:deploy/mpsteer.yaml default/mpsteer:deploy/default/mpsteer; do \
		dst=$(DESTDIR)$(SYSCONFDIR)/$${f%%:*}; src=$${f#*:}; \
		if [ -e "$$dst" ]; then echo "kept $$dst (yours; the default is $$src)"; \
		else install -m 0644 "$$src" "$$dst"; echo "installed $$dst"; fi; \
	done
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; \
		echo "start it: systemctl enable --now mpsteer   (config: $(SYSCONFDIR)/mpsteer/mpsteer.yaml)"; fi

uninstall:
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl disable --now mpsteer.service 2>/dev/null || true; fi
	rm -f $(DESTDIR)$(BINDIR)/mpsteer $(DESTDIR)$(UNITDIR)/mpsteer.service $(DESTDIR)$(MANDIR)/man8/mpsteer.8.gz $(DESTDIR)$(MANDIR)/man8/mpsteer-*.8.gz
	rm -rf $(DESTDIR)$(DOCDIR)
	@if [ -z "$(DESTDIR)" ] && [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
	@echo "kept $(DESTDIR)$(SYSCONFDIR)/mpsteer/ and $(DESTDIR)$(SYSCONFDIR)/default/mpsteer (your config; remove them by hand)"

# A .deb of the files `make install` puts in place (PREFIX=/usr), built by
# nfpm (tools/go.mod): build/mpsteer_VERSION_ARCH.deb.
deb: $(BUILD_DEPS) man
	rm -rf $(BUILDDIR)/deb-root
	$(MAKE) --no-print-directory install DESTDIR=$(abspath $(BUILDDIR))/deb-root PREFIX=/usr UNITDIR=/usr/lib/systemd/system BUILD_DEPS= BIN='$(BIN)' BUILDDIR='$(BUILDDIR)'
	sed 's|@STAGE@|$(abspath $(BUILDDIR))/deb-root|g' deploy/nfpm.yaml > $(BUILDDIR)/nfpm.yaml
	VERSION='$(VERSION)' ARCH='$(DEB_ARCH)' \
		$(GO) tool -modfile=tools/go.mod nfpm package --config $(BUILDDIR)/nfpm.yaml --packager deb --target $(BUILDDIR)/

clean:
	rm -rf bin build
