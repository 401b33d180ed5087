# ordertimeout: `make help` lists the targets.
SHELL := /bin/bash
GO ?= go
COMPOSE_FILE := deploy/compose/compose.yaml
# Integration and e2e tests start containers; on 2 cores keep packages serial.
TEST_FLAGS ?= -count=1 -p 1 -timeout 25m

.DEFAULT_GOAL := help

.PHONY: help
help: ## list the targets
	@grep -hE '^[a-z][a-zA-Z_-]*:.*## ' $(MAKEFILE_LIST) | sort | awk -F':.*## ' '{printf "  %-14s %s\n", $$1, $$2}'

.PHONY: docker
docker: ## make sure a Docker engine and compose answer (installs them on Debian)
	@scripts/ensure-docker.sh

.PHONY: images
images: docker ## build the Postgres, NATS and service images (reused while unchanged)
	@scripts/images.sh postgres nats

.PHONY: test
test: images ## every test: unit, integration, e2e and browser (needs Docker; installs it)
	$(GO) test $(TEST_FLAGS) ./...

.PHONY: test-short
test-short: ## unit tests only, no containers
	$(GO) test -short -count=1 ./...

.PHONY: bench-wheel
bench-wheel: ## pkg/wheel against Go's runtime timers: go test -bench and wheelbench
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/wheel
	$(GO) run ./pkg/wheel/cmd/wheelbench all 1000000

.PHONY: bench
bench: bench-wheel ## every benchmark
