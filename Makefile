# pullguard — see README.md. Every target runs on a fresh Linux machine with Go.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build demo test unit release image release-test release-check e2e e2e-systemd e2e-kubelet e2e-kubelet-build e2e-kubelet-run e2e-fleet bench bench-kubelet bench-serve bench-upstream fuzz sweep lint clean FORCE

all: build

build:
	$(GO) build ./...

## demo: the multi-tenant story on the embedded registry and runtime.
demo: bin/pullguard
	./bin/pullguard demo

bin/pullguard: FORCE
	$(GO) build -o bin/pullguard ./cmd/pullguard

FORCE:

## test: lint; then the real-kubelet module's test binary and the binaries
## it runs (e2e-kubelet-build: the kubelet, kube-apiserver and containerd
## v2.2.9, built once into the Go module cache); then, side by side, every
## test of the module with the race detector (unit: the e2e suite included,
## ./test/e2e: as root it installs containerd, runc and docker-registry when
## missing; in CI a missing prerequisite fails, elsewhere the suite skips)
## and the scenarios under a real kubelet (e2e-kubelet-run), which leave a
## core mostly idle: they overlap the unit tests' compile; and release-test.
## Each target's output is printed whole when it ends.
test: lint
	$(MAKE) --no-print-directory e2e-kubelet-build
	$(MAKE) --no-print-directory -j2 --output-sync=target unit e2e-kubelet-run release-test

unit:
	$(GO) test -race -count=1 $(PKGS)

## release: dist/ for VERSION (semver with a leading v: v1.2.3, v1.3.0-rc.1):
## static (CGO_ENABLED=0, -trimpath) linux/amd64 and linux/arm64 binaries
## stamped with the version, the commit and the commit's date; a .deb and an
## .rpm per architecture (nfpm, in tools/release, a module of its own); and
## SHA256SUMS. Two runs on one commit with one Go toolchain give identical
## bytes: every date in dist/ is the commit's.
VERSION ?=
release:
	@test -n "$(VERSION)" || { echo "usage: make release VERSION=v1.2.3"; exit 2; }
	cd tools/release && $(GO) run . -C ../.. -version '$(VERSION)' -dist dist -clean

## image: dist/ for VERSION with the binaries and the images only (no
## .deb or .rpm): per architecture a docker-archive
## (pullguard-VERSION-image-linux-ARCH.tar, tagged
## ghcr.io/pullguard/pullguard:VERSION), the OCI archive of the index of
## both (pullguard-VERSION-image-oci.tar), and SHA256SUMS. Built with no
## network, as reproducibly as the release. ARCH=amd64 builds one
## architecture; PUSH=127.0.0.1:5000/pullguard/pullguard:VERSION pushes the
## index to a registry (docs/operations.md, "The DaemonSet").
ARCH ?= amd64,arm64
PUSH ?=
image:
	@test -n "$(VERSION)" || { echo "usage: make image VERSION=v1.2.3 [ARCH=amd64] [PUSH=registry/repo:tag]"; exit 2; }
	cd tools/release && $(GO) run . -C ../.. -version '$(VERSION)' -dist dist -clean -image-only -arch '$(ARCH)' -push '$(PUSH)'

## release-test: tools/release's tests: a release of this machine's
## architecture built twice from the checkout (the second build links again
## from the build cache) and compared, its binary static, its --version and
## pullguard_build_info, the .deb's and .rpm's files, versions and dates.
## Without -race: the race detector would instrument nfpm's compression of
## the binary (minutes on 2 cores) and the test's own concurrency is one
## goroutine reading serve's log.
release-test:
	cd tools/release && $(GO) test -count=1 -timeout 20m .

## release-check: `make release` in two fresh clones of HEAD, the second at
## another path with an empty GOCACHE; every artifact of both architectures
## must be byte-identical (docs/testing.md). Slow; not part of `make test`.
release-check:
	cd tools/release && PULLGUARD_RELEASE_CHECK=1 $(GO) test -count=1 -v -timeout 90m -run '^TestReleaseCheck$$' .

## e2e: only the multi-tenant scenarios on a real containerd and registry.
e2e:
	$(GO) test -count=1 -v ./test/e2e/

## e2e-systemd: pullguard under a real systemd, booted as PID 1 of its own
## PID and mount namespace from a Debian root (debootstrap, cached under
## /var/cache/pullguard-e2e): the release's .deb (tools/release, this
## machine's architecture) installed with dpkg, the shipped units' socket
## activation, READY, the sandbox with a credential-provider plugin, then
## `pullguard install`/`uninstall --restart-kubelet` with a kubelet stand-in.
## As root; not part of `make test` (see docs/testing.md for its time).
e2e-systemd:
	PULLGUARD_E2E_SYSTEMD=1 $(GO) test -count=1 -v -timeout 20m ./test/systemd/

## e2e-kubelet: the multi-tenant scenarios under the upstream kubelet and
## kube-apiserver (test/kubelet, a module of its own: the product module
## never imports k8s.io/kubernetes), and TestKubeletConfigurationParity:
## every KubeletConfiguration the kubelet's own code accepts, `pullguard
## config check` accepts (it needs no root; its k8s.io/kubernetes packages
## compile once, with the kubelet's build). The first run builds both, and
## containerd v2.2.9, into the Go module cache; see docs/testing.md.
e2e-kubelet:
	$(MAKE) --no-print-directory e2e-kubelet-build
	$(MAKE) --no-print-directory e2e-kubelet-run

## e2e-fleet: a cluster of two nodes on this machine (test/kubelet's
## TestFleet): etcd, kube-apiserver, kube-controller-manager and
## kube-scheduler (built once into the Go module cache, as the kubelet is),
## and two nodes, each run by a real systemd booted as PID 1 of its own PID
## and mount namespace (a debootstrap root), each with its own containerd
## and kubelet; pullguard installed on each, the tenants' scenarios on
## both, records per node, secure metrics, uninstall; then the DaemonSet
## from the release's image switching the nodes one at a time through their
## systemd, and its uninstall mode. As root; not part of `make test` (about
## 95 s with its binaries built; see docs/testing.md).
e2e-fleet:
	$(MAKE) --no-print-directory e2e-kubelet-build
	cd test/kubelet && PULLGUARD_E2E_FLEET=1 $(GO) test -count=1 -v -timeout 60m -run '^TestFleet$$' .

## KUBELET_VERSION=1.31.14 runs them with that kubelet release (1.31 or
## later, built once into the module cache as the default one is; a kubelet
## more than three minors older than the module's kube-apiserver gets the
## kube-apiserver of its own release). Modes and steps that need a newer
## kubelet skip and say why. SERVE_OUTAGE=60s keeps serve down that long in
## the outage step (default 15s).
KUBELET_VERSION ?=
SERVE_OUTAGE ?=
E2E_KUBELET_ENV = PULLGUARD_E2E_KUBELET_VERSION=$(KUBELET_VERSION) PULLGUARD_E2E_SERVE_OUTAGE=$(SERVE_OUTAGE)

## e2e-kubelet-build: compiles the module's test binary and builds the
## binaries its scenarios run (TestBinaries; as root, or in CI).
e2e-kubelet-build:
	cd test/kubelet && $(E2E_KUBELET_ENV) $(GO) test -count=1 -v -timeout 45m -run '^TestBinaries$$' .

e2e-kubelet-run:
	cd test/kubelet && $(E2E_KUBELET_ENV) $(GO) test -count=1 -v -timeout 45m .

## bench: the benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## bench-kubelet: pod start-up (SEQ pods one at a time, then PODS pods
## created at once, of present images and of images a tenant must verify) and a reboot storm (200
## containers of 40 images), under the real kubelet with its own gate and
## behind pullguard serve, in alternating rounds of one run; prints the
## tables of docs/benchmarks.md ("serve on a node"). As root; not part of
## `make test`.
PODS ?= 50
SEQ ?= 10
ROUNDS ?= 3
STORM_ROUNDS ?= 2
## PAIRS=N adds N pairs of bursts in both modes on one node, back to back
## (both bursts, or one: PULLGUARD_BENCH_PAIRED_BURSTS=present or verify),
## and reports the ratio's 95 % interval (docs/benchmarks.md: the runs, their
## commands and the machine).
PAIRS ?= 0
bench-kubelet:
	cd test/kubelet && PULLGUARD_BENCH_KUBELET=1 PULLGUARD_BENCH_PODS=$(PODS) PULLGUARD_BENCH_SEQ=$(SEQ) PULLGUARD_BENCH_ROUNDS=$(ROUNDS) PULLGUARD_BENCH_STORM_ROUNDS=$(STORM_ROUNDS) \
	  PULLGUARD_BENCH_PAIRS=$(PAIRS) $(GO) test -count=1 -v -timeout 180m -run '^TestBenchKubelet$$' .

## bench-serve: the real `pullguard serve` as a process on a node (Linux):
## its RSS, VmHWM and CPU after start-up with 1 000 and 10 000 images in a
## fake CRI runtime and 10 credential records per image in its store, its
## time to the first answer and the first full ListImages, and the same
## after bursts of 64 pods starting at once (docs/benchmarks.md, "serve on
## a node"). Not part of `make test`.
## SERVE_FLAGS passes flags, e.g. SERVE_FLAGS='-rounds 5 -images 10000 -smaps 8'.
SERVE_FLAGS ?=
bench-serve: bin/pullguard
	$(GO) build -o bin/bench-serve ./bench/serve && ./bin/bench-serve -pullguard bin/pullguard $(SERVE_FLAGS)

## bench-upstream: pullguard's tracker beside the upstream kubelet's pull
## manager (k8s.io/kubernetes, built as the kubelet builds it) on the same
## workloads, in one process; prints the tables of docs/benchmarks.md
## ("Against upstream"). A module of its own (bench/upstream), not part of
## `make test`. The first run downloads and builds k8s.io/kubernetes.
## UPSTREAM_FLAGS passes flags, e.g. UPSTREAM_FLAGS='-rounds 3 -sizes 1000,10000'.
UPSTREAM_FLAGS ?=
bench-upstream:
	cd bench/upstream && $(GO) build -o ../../bin/bench-upstream . && ../../bin/bench-upstream $(UPSTREAM_FLAGS)

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for fz in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$fz"; \
	    $(GO) test -run '^$$' -fuzz "^$$fz$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## sweep: the record store's damage sweeps in full: every bit and page boundary of a
## small store, and SWEEP_POSITIONS random bits of a store of 10 000 records; and the
## tracker's randomized index tests and security property at full length
## (CREDTRACKER_LONG; `make unit` runs a short share of them).
SWEEP_POSITIONS ?= 10000
sweep:
	CREDTRACKER_LONG=1 CREDTRACKER_SWEEP_LARGE=$(SWEEP_POSITIONS) $(GO) test -count=1 -run '^(TestStoreSweep|TestIndex|TestSecurityProperty)' -v -timeout 90m ./credtracker/

## lint: gofmt, go vet, go.mod/go.sum exactly as `go mod tidy` leaves them,
## and the module type-checked for darwin.
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files -o --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	@$(GO) mod tidy -diff || { echo "go.mod or go.sum is not tidy: run 'go mod tidy' and commit the result"; exit 1; }
	@# The modules that require this one see its go.mod change with it.
	@for m in test/kubelet bench/upstream; do \
	  (cd $$m && $(GO) mod tidy -diff) || { echo "$$m/go.mod or go.sum is not tidy: run 'go mod tidy' in $$m and commit the result"; exit 1; }; \
	done
	@# tools/release pins nfpm in a module of its own.
	@(cd tools/release && $(GO) mod tidy -diff) || { echo "tools/release/go.mod or go.sum is not tidy: run 'go mod tidy' in tools/release and commit the result"; exit 1; }
	@# Embedders build on other systems: the module must at least compile
	@# there. Type-checked from source with every dependency (tools/crosscheck,
	@# a module of its own), where a cold `GOOS=darwin go build ./...` would
	@# compile every dependency a second time.
	cd tools/crosscheck && $(GO) test -count=1 . && $(GO) run . -C ../.. -goos darwin ./...
	cd tools/release && $(GO) vet .

clean:
	rm -rf pullguard-state bin dist
