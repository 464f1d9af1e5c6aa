GO ?= go
BIN := bin/fledge
FUZZTIME ?= 60s

.PHONY: build test test-race vet wazero-check fuzz bench demo clean

build:
	$(GO) build -o $(BIN) ./cmd/fledge

test:
	$(GO) test -count=1 -timeout 40m ./...

# The packages whose code runs concurrently (the session core, the log, the egress engine, the
# sandbox backends), under the race detector.
RACE_PKGS = ./protocolhost/core/... ./audit/... ./egress/... ./sandbox/...

test-race:
	$(GO) test -race -count=1 -timeout 40m $(RACE_PKGS)

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# third_party/wazero is upstream's code as released plus fledge.patch, and go vet reports on
# every package of the main module a package imports: its findings there (upstream's
# ReadByte(offset)/Seek API, names in its assembly) stay as released, and `make wazero-check`
# proves that copy is exactly that. Any finding elsewhere, or a failed build, fails vet.
VET_OWN = out=$$($(GO) vet ./... 2>&1 | grep -v -e '^\#' -e '^third_party/wazero/'); \
	if [ -n "$$out" ]; then echo "$$out"; exit 1; fi
OWN = $(shell $(GO) list ./... | grep -v /third_party)
OWN_DARWIN = $(shell GOOS=darwin $(GO) list ./... | grep -v /third_party)

vet:
	@out=$$(gofmt -l $$(ls -d */ | grep -v third_party) *.go 2>/dev/null); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	@$(VET_OWN)
	@export GOOS=darwin; $(VET_OWN)
	GOOS=darwin $(GO) build ./...
	GOOS=freebsd $(GO) build ./...
	GOOS=windows $(GO) build ./...
	GOARCH=arm64 $(GO) build ./...
	GOARCH=386 $(GO) build ./...
	$(GO) mod tidy -diff
	GOBIN=$(CURDIR)/bin $(GO) install $(STATICCHECK)
	bin/staticcheck $(OWN)
	GOOS=darwin bin/staticcheck $(OWN_DARWIN)

# third_party/wazero is wazero v1.12.0 from the module proxy plus fledge.patch, byte for byte,
# and upstream's tests of the patched packages pass on it.
wazero-check:
	bash third_party/wazero/regen.sh --check --test

fuzz:
	FUZZTIME=$(FUZZTIME) bash fuzz/run.sh

# Every row of docs/performance.md's table with its goal and whether it meets it, measured
# against baselines of the same run. FLEDGE_BENCH_INSTALL=1 installs the peers (bubblewrap,
# firejail, hyperfine, sandbox-runtime), FLEDGE_BENCH_QUICK=1 is a fast smoke run.
bench: build
	GO=$(GO) bash bench/run.sh

demo: build
	bash scripts/demo.sh

clean:
	rm -rf bin
