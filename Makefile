GO ?= go
BIN := bin/fledge
FUZZTIME ?= 60s

.PHONY: build test vet fuzz bench demo clean

build:
	$(GO) build -o $(BIN) ./cmd/fledge

test:
	$(GO) test -count=1 ./...

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

vet:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=freebsd $(GO) build ./...
	GOARCH=arm64 $(GO) build ./...
	GOARCH=386 $(GO) build ./...
	$(GO) mod tidy -diff
	GOBIN=$(CURDIR)/bin $(GO) install $(STATICCHECK)
	bin/staticcheck ./...
	GOOS=darwin bin/staticcheck ./...

fuzz:
	FUZZTIME=$(FUZZTIME) bash fuzz/run.sh

bench: build
	bash bench/run.sh

demo: build
	bash scripts/demo.sh

clean:
	rm -rf bin
