# ordertimeout: `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
# Integration and e2e tests start containers; on 2 cores keep packages serial.
TEST_FLAGS ?= -count=1 -p 1 -timeout 25m
# make demo: orders created per second, for how long, and against which API.
DEMO_RATE ?= 20
DEMO_DURATION ?= 0
DEMO_ORDERS_URL ?= http://127.0.0.1:8081
DEMO_TOKEN ?= dev-token

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z][a-zA-Z0-9_-]*:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: docker
docker: ## make sure a Docker engine and compose answer (installs them on Debian)
	@scripts/ensure-docker.sh

.PHONY: images
images: docker ## build the Postgres, NATS and service images (reused while unchanged)
	@scripts/images.sh

.PHONY: up
up: images ## start the platform (deploy/compose), wait until healthy, print the URLs
	@scripts/stack.sh up

.PHONY: down
down: ## stop the platform (V=1 also removes its volumes)
	@DOWN_VOLUMES=$(V) scripts/stack.sh down

.PHONY: logs
logs: ## follow the platform's logs
	@scripts/stack.sh logs

.PHONY: demo
demo: ## load generator against `make up`: DEMO_RATE orders/s, random payments (Ctrl-C stops)
	$(GO) run ./e2e/cmd/demo -orders-url $(DEMO_ORDERS_URL) -token $(DEMO_TOKEN) -rate $(DEMO_RATE) -duration $(DEMO_DURATION)

.PHONY: test
test: images ## every test: unit, integration, e2e and browser (needs Docker; installs it)
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: test-e2e
test-e2e: images ## only the end-to-end suite against the built containers
	$(GO) test $(TEST_FLAGS) -v ./e2e/...

.PHONY: test-short
test-short: ## unit tests only, no containers
	$(GO) test -short -count=1 ./...

.PHONY: bench-wheel
bench-wheel: ## pkg/wheel against Go's runtime timers: go test -bench and wheelbench
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/wheel
	$(GO) run ./pkg/wheel/cmd/wheelbench all 1000000

.PHONY: bench
bench: bench-wheel ## every benchmark
