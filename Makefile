GO ?= go
BIN := bin/fledge
FUZZTIME ?= 60s

.PHONY: build test vet fuzz bench demo clean

build:
	$(GO) build -o $(BIN) ./cmd/fledge

test:
	$(GO) test -count=1 ./...

vet:
	gofmt -l . | tee /dev/stderr | (! read)
	$(GO) vet ./...
	GOOS=darwin $(GO) vet ./...
	GOOS=darwin $(GO) build ./...
	GOOS=freebsd $(GO) build ./...

fuzz:
	FUZZTIME=$(FUZZTIME) bash fuzz/run.sh

bench: build
	bash bench/run.sh

demo: build
	bash scripts/demo.sh

clean:
	rm -rf bin
