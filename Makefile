# pullguard — see README.md. Every target runs on a fresh Linux machine with Go.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build demo test unit e2e bench fuzz sweep lint clean FORCE

all: build

build:
	$(GO) build ./...

## demo: the multi-tenant story on the embedded registry and runtime.
demo: bin/pullguard
	./bin/pullguard demo

bin/pullguard: FORCE
	$(GO) build -o bin/pullguard ./cmd/pullguard

FORCE:

## test: vet, then every test with the race detector, the e2e suite included
## (./test/e2e: as root it installs containerd, runc and docker-registry when
## missing; in CI a missing prerequisite fails, elsewhere the suite skips).
test: lint unit

unit:
	$(GO) test -race -count=1 $(PKGS)

## e2e: only the multi-tenant scenarios on a real containerd and registry.
e2e:
	$(GO) test -count=1 -v ./test/e2e/

## bench: the benchmarks recorded in docs/benchmarks.md.
bench:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) $(PKGS)

## fuzz: every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in $$($(GO) list $(PKGS)); do \
	  for fz in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz' || true); do \
	    echo "== $$pkg $$fz"; \
	    $(GO) test -run '^$$' -fuzz "^$$fz$$" -fuzztime $(FUZZTIME) $$pkg; \
	  done; \
	done

## sweep: the record store's damage sweeps in full: every bit and page boundary of a
## small store, and SWEEP_POSITIONS random bits of a store of 10 000 records.
SWEEP_POSITIONS ?= 10000
sweep:
	CREDTRACKER_SWEEP_LARGE=$(SWEEP_POSITIONS) $(GO) test -count=1 -run '^TestStoreSweep' -v -timeout 90m ./credtracker/

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files -o --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf pullguard-state bin
