# make test: install what the tests need, then run them all with the race
# detector, and the gateway's HTTP/2 suites again over client_h2: frames.
# make bench: the side-by-side benchmarks (bench/ is its own module).
GO ?= go
STATICCHECK = $(GO) tool -modfile=tools/go.mod staticcheck
BENCHSTAT = $(GO) tool -modfile=tools/go.mod benchstat

.PHONY: test test-deps lint bench build charts stress

test: test-deps
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 20m ./...
	RATEKEEPER_TEST_CLIENT_H2=frames $(GO) test -race -count=1 -run 'H2|GRPC|Hop|Transport|TLS|Frames|Authority' ./gateway
	@if find bench -name '*.go' | grep -q .; then \
	  echo 'cd bench && go vet ./... && go test -race -count=1 -run . ./...'; \
	  cd bench && $(GO) vet ./... && $(GO) test -race -count=1 -run . -timeout 10m ./...; fi

test-deps:
	@scripts/test-deps.sh curl:curl openssl:openssl chromium:chromium chromedriver:chromium-driver

build:
	$(GO) build -buildvcs=auto -o bin/ratekeeper ./cmd/ratekeeper

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	$(STATICCHECK) ./...
	@if find bench -name "*.go" | grep -q .; then cd bench && $(GO) vet ./...; fi

bench:
	cd bench && ./run.sh

# make stress (on demand, not in CI): the tests that decide on real servers,
# STRESS_ROUNDS times (default 5) under -race while a core is kept busy,
# each failure printed, then "N runs, M failures" (scripts/stress.sh).
stress: test-deps
	scripts/stress.sh

# make charts: regenerate docs/img: the charts in docs/algorithms.md,
# docs/redis.md and docs/gateway.md from the simulator itself (a test fails
# when the committed CSVs no longer match), and those in docs/benchmarks.md
# from the results in bench/results.
charts: build
	bin/ratekeeper simulate pacing --out docs/img
	bin/ratekeeper simulate pacing-with-pauses --out docs/img
	bin/ratekeeper simulate boundary --out docs/img
	bin/ratekeeper simulate accuracy --out docs/img
	bin/ratekeeper simulate custom --worker wait --name pacing-wait --out docs/img
	bin/ratekeeper simulate shared-roundrobin --out docs/img
	bin/ratekeeper simulate shared-skewed --out docs/img
	bin/ratekeeper simulate concurrency --out docs/img
	bin/ratekeeper simulate tokens --out docs/img
	bin/ratekeeper simulate calendar --out docs/img
	bench/charts.sh
