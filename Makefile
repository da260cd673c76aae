# taskgate — common tasks. `make test` is the test command of the README and CI.
GO       ?= go
# Fuzz budgets are counts of inputs, not durations: with a duration, Go
# 1.26's fuzz coordinator can fail a target with a bare "context deadline
# exceeded" when the time runs out mid-input (golang/go#75804, fixed in 1.27).
FUZZTIME ?= 10000x

.PHONY: run demo build test test-go fuzz-short deploy-test bench bench-e2e lint fmt

run demo:
	$(GO) run ./cmd/gateway -demo

build:
	CGO_ENABLED=0 $(GO) build -trimpath -o bin/gateway ./cmd/gateway

# The whole suite: vet, race tests, benchmarks compiled and run once, short
# fuzz runs, and the Helm chart's tests.
test: test-go fuzz-short deploy-test

test-go:
	$(GO) vet ./...
	$(GO) test -race -count=1 ./...
	$(GO) test -run='^$$' -bench=. -benchtime=1x ./... > /dev/null

fuzz-short:
	@for target in $$(grep -rl --include='*_test.go' '^func Fuzz' . | grep -v '^./deploy/' | xargs -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$target/*_test.go | sed 's/func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$target $$f ($(FUZZTIME))"; \
	    $(GO) test $$target -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) || exit 1; \
	  done; \
	done

deploy-test:
	helm lint deploy/helm/taskgate --strict --kube-version 1.34.0
	helm lint deploy/helm/taskgate --strict --kube-version 1.34.0 -f deploy/helm/taskgate/ci/full-values.yaml
	cd deploy && $(GO) vet ./... && $(GO) test -race -count=1 ./...

bench:
	$(GO) test -run='^$$' -bench=. -benchmem ./...

bench-e2e:
	$(GO) run ./bench/e2e

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || (gofmt -l $$(git ls-files '*.go'); exit 1)
	$(GO) vet ./...
	cd deploy && $(GO) vet ./...

fmt:
	gofmt -w $$(git ls-files '*.go')
