# pullguard — see README.md. Every target runs on a fresh Linux machine with Go.
GO        ?= go
PKGS      ?= ./...
FUZZTIME  ?= 30s
BENCHTIME ?= 1s
export PATH := $(PATH):/usr/local/go/bin

.PHONY: all build demo test unit e2e bench fuzz lint clean FORCE

all: build

build:
	$(GO) build ./...

## demo: the multi-tenant story on the embedded registry and runtime.
demo: bin/pullguard
	./bin/pullguard demo

bin/pullguard: FORCE
	$(GO) build -o bin/pullguard ./cmd/pullguard

FORCE:

## test: vet, then every test with the race detector (the e2e suite joins once it exists).
test: lint unit

unit:
	$(GO) test -race -count=1 $(PKGS)

e2e:
	@echo "the e2e suite has not landed yet" >&2

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

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null; git ls-files -o --exclude-standard '*.go' 2>/dev/null)); \
	  if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

clean:
	rm -rf pullguard-state bin
