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

# TRACING=1: make images also builds the OTLP receiver (Jaeger v2 from its Go
# module, minutes the first time) and make up starts it (compose profile
# "tracing").
TRACING ?=

.PHONY: images
images: docker ## build the Postgres, NATS and service images (reused while unchanged); TRACING=1 adds the OTLP receiver
	@scripts/images.sh
	@$(if $(TRACING),scripts/images.sh jaeger,true)

.PHONY: up
up: images ## start the platform (deploy/compose), wait until healthy, print the URLs; TRACING=1 adds the OTLP receiver (Jaeger)
	@TRACING=$(TRACING) scripts/stack.sh up

.PHONY: up-ha
up-ha: images ## start the cluster (deploy/compose/compose.ha.yaml: 3 NATS nodes, 3 timeoutd, 2 orders, Postgres under Patroni on 3 nodes with 3 etcd), wait until healthy
	@STACK=ha scripts/stack.sh up

.PHONY: down
down: ## stop the platform and the cluster (V=1 also removes their volumes)
	@DOWN_VOLUMES=$(V) scripts/stack.sh down
	@DOWN_VOLUMES=$(V) STACK=ha scripts/stack.sh down

.PHONY: tenant-add
tenant-add: ## add a tenant to the running platform, no Go, no restart: make tenant-add TENANT=billing FIRE=billing.due.
	@scripts/tenant.sh add "$(TENANT)" "$(FIRE)"

.PHONY: tenant-prefixes
tenant-prefixes: ## give a tenant other fire subject prefixes; its pending deadlines under none end as missed: make tenant-prefixes TENANT=billing FIRE=billing.due.v2.
	@scripts/tenant.sh prefixes "$(TENANT)" "$(FIRE)"

.PHONY: tenant-remove
tenant-remove: ## remove a tenant; its pending deadlines end as missed (unknown_tenant), none fires: make tenant-remove TENANT=billing
	@scripts/tenant.sh remove "$(TENANT)"

.PHONY: logs
logs: ## follow the platform's logs
	@scripts/stack.sh logs

.PHONY: demo
demo: ## load generator against `make up`: DEMO_RATE orders/s, random payments (Ctrl-C stops)
	$(GO) run ./e2e/cmd/demo -orders-url $(DEMO_ORDERS_URL) -token $(DEMO_TOKEN) -rate $(DEMO_RATE) -duration $(DEMO_DURATION)

# The dashboard (web/wasm): Go compiled to WebAssembly, with its static files.
WASM_DIST := web/wasm/dist
WASM_SRC := $(shell find web/wasm services/timeoutd/api pkg/events -name '*.go' -not -name '*_test.go' -not -path '$(WASM_DIST)/*') $(wildcard web/wasm/static/*)

.PHONY: wasm
wasm: $(WASM_DIST)/main.wasm.gz ## build the dashboard into web/wasm/dist (main.wasm, .gz, wasm_exec.js, static files)

$(WASM_DIST)/main.wasm.gz: $(WASM_SRC) go.mod
	@mkdir -p $(WASM_DIST)
	GOOS=js GOARCH=wasm $(GO) build -trimpath -ldflags='-s -w' -o $(WASM_DIST)/main.wasm ./web/wasm
	gzip -9 -n -k -f $(WASM_DIST)/main.wasm
	cp web/wasm/static/* "$$($(GO) env GOROOT)/lib/wasm/wasm_exec.js" $(WASM_DIST)/

.PHONY: test-wasm
test-wasm: ## the dashboard's syscall/js layer under GOOS=js GOARCH=wasm, run by Node
	GOOS=js GOARCH=wasm $(GO) test -count=1 -exec="$$($(GO) env GOROOT)/lib/wasm/go_js_wasm_exec" ./web/wasm/...

.PHONY: chromium
chromium: ## make sure Chromium is installed for the browser tests (apt-get on Debian)
	@scripts/ensure-chromium.sh

.PHONY: promtool
promtool: ## make sure promtool is installed for the alert rules' tests (apt-get on Debian)
	@scripts/ensure-promtool.sh

PROMTOOL ?= promtool

.PHONY: node
node: ## make sure Node.js and npm are installed (apt-get on Debian)
	@scripts/ensure-node.sh

.PHONY: test-contract
test-contract: node ## validate the AsyncAPI document docs/contract/asyncapi.yaml with the AsyncAPI parser (npm ci)
	@scripts/contract.sh

.PHONY: test-alerts
test-alerts: promtool ## check the Prometheus alert rules (deploy/prometheus) and run their unit tests
	$(PROMTOOL) check rules deploy/prometheus/alerts.yaml
	$(PROMTOOL) test rules deploy/prometheus/alerts_test.yaml

# The e2e suite's trace test needs the OTLP receiver's image.
test test-e2e: TRACING = 1

.PHONY: test
test: images chromium node wasm test-wasm test-alerts test-contract ## every test: unit, integration (the simulation for 90 s among them), e2e (short soak, hostile inputs), browser, the AsyncAPI contract, a short fuzz, the bench module's
	GO=$(GO) scripts/gotest.sh $(TEST_FLAGS) ./...
	cd bench && GO=$(GO) ../scripts/gotest.sh $(TEST_FLAGS) ./...
	FUZZTIME=$(FUZZTIME_SHORT) scripts/fuzz.sh

# Pinned so that a new release's checks never fail CI on their own.
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

# pkg/ordersclient is generated from services/orders/openapi.json by
# oapi-codegen, whose version is pinned in the package's go:generate line.
ORDERSCLIENT_GEN := pkg/ordersclient/client.gen.go

.PHONY: generate
generate: ## regenerate the orders API client (pkg/ordersclient) from services/orders/openapi.json
	$(GO) generate ./pkg/ordersclient

.PHONY: generate-check
generate-check: ## fail when pkg/ordersclient/client.gen.go is not what `make generate` writes (and refresh it)
	@tmp=$$(mktemp -d) && trap 'rm -rf "$$tmp"' EXIT && cp $(ORDERSCLIENT_GEN) "$$tmp/" && \
	$(GO) generate ./pkg/ordersclient && \
	if ! diff -u "$$tmp/client.gen.go" $(ORDERSCLIENT_GEN); then \
		echo "$(ORDERSCLIENT_GEN) was stale; it is regenerated now: commit it"; exit 1; fi

.PHONY: lint
lint: generate-check ## generated client fresh, go.mod tidy, go vet and staticcheck, in both modules (fails on any finding)
	$(GO) mod tidy -diff
	cd bench && $(GO) mod tidy -diff
	$(GO) vet ./...
	cd bench && $(GO) vet ./...
	GOOS=js GOARCH=wasm $(GO) vet ./web/wasm/...
	$(GO) run $(STATICCHECK) ./...
	cd bench && $(GO) run $(STATICCHECK) ./...

.PHONY: test-e2e
test-e2e: images chromium node ## only the end-to-end suite against the built containers
	$(GO) test $(TEST_FLAGS) -v ./e2e/...

.PHONY: test-short
test-short: ## unit tests only, no containers
	$(GO) test -short -count=1 ./...
	cd bench && $(GO) test -short -count=1 ./...

.PHONY: run-timeoutd
run-timeoutd: ## run timeoutd from source (needs TIMEOUTD_DATABASE_URL, TIMEOUTD_NATS_URL and the streams: NATS_URL=… go run ./deploy/streams; see services/timeoutd/README.md)
	$(GO) run ./services/timeoutd/cmd/timeoutd

.PHONY: bench-timeoutd-go
bench-timeoutd-go: images ## timeoutd's in-process benchmarks on test containers: ingest, expiry storm, recovery of 1M
	$(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./services/timeoutd/daemon

.PHONY: bench-wheel
bench-wheel: ## pkg/wheel against Go's runtime timers: go test -bench and wheelbench
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/wheel
	$(GO) run ./pkg/wheel/cmd/wheelbench all 1000000

# Sizes of the load benchmarks (bench/, a module of its own so River stays
# out of the services' dependencies); results go to bench/results/.
BENCH_N ?= 1000000
BENCH_ORDERS_DURATION ?= 30s
# COMMAND_BATCH: the load tool packs each window of this many commands into
# batches per partition, as the orders relay packs a claim; 0 sends single
# commands.
COMMAND_BATCH ?= 1000

.PHONY: bench-timeoutd
bench-timeoutd: images ## timeoutd beside River on one Postgres: ingest, clear, bytes, recovery, RSS, expiry storm
	cd bench && $(GO) run ./cmd/loadgen timeoutd -n $(BENCH_N) -command-batch $(COMMAND_BATCH) -out results/timeoutd.txt

# make bench-storms: the expiry storm (STORM_N deadlines due over 10 s)
# STORM_RUNS times, timeoutd with single commands beside River and NATS
# JetStream's own message schedules on the same servers, then timeoutd with
# commands packed by COMMAND_BATCH; one results file per run under
# STORM_DIR, and the table of medians and ranges (bench/cmd/stormfigures).
STORM_RUNS ?= 5
STORM_N ?= 100000
STORM_DIR ?= results/$(shell date -u +%F)-storms

.PHONY: bench-storms
bench-storms: images ## the expiry storm STORM_RUNS (5) times: timeoutd beside River and NATS message schedules, then packed; the medians
	cd bench && mkdir -p $(STORM_DIR) && for i in $$(seq 1 $(STORM_RUNS)); do \
		$(GO) run ./cmd/loadgen timeoutd -steps storm -n 1000 -storm-n $(STORM_N) -peers timeoutd,river,natsched \
			-river-storms available:10ms/50ms -out $(STORM_DIR)/run-$$i-single.txt || exit 1; \
		$(GO) run ./cmd/loadgen timeoutd -steps storm -n 1000 -storm-n $(STORM_N) -peers timeoutd \
			-command-batch $(COMMAND_BATCH) -out $(STORM_DIR)/run-$$i-packed.txt || exit 1; \
	done
	cd bench && $(GO) run ./cmd/stormfigures $(STORM_DIR)/*.txt

# make bench-sustained (issue 15, "No decay"): timeoutd under a steady churn
# of SUSTAINED_RATE commands/s on live orders for SUSTAINED_DURATION, with a
# 10k/s storm (100,000 deadlines over 10 s) every SUSTAINED_STORM_EVERY; the
# storms' lateness is drawn into docs/sustained-storms.png.
SUSTAINED_DURATION ?= 30m
SUSTAINED_RATE ?= 1000
SUSTAINED_STORM_EVERY ?= 5m
SUSTAINED_OUT ?= results/sustained.txt
# SUSTAINED_PROFILES, when set, is a directory for nats-server's CPU
# profiles around each storm (loadgen -sustained-profiles).
SUSTAINED_PROFILES ?=

.PHONY: bench-sustained
bench-sustained: images ## timeoutd under steady churn for SUSTAINED_DURATION (30m), a 10k/s storm every 5 min; CPU, tables, streams per minute; the PNG
	cd bench && $(GO) run ./cmd/loadgen timeoutd -steps sustained -peers timeoutd -sustained-duration $(SUSTAINED_DURATION) \
		-sustained-rate $(SUSTAINED_RATE) -sustained-storm-every $(SUSTAINED_STORM_EVERY) -sustained-storm-n 100000 \
		-command-batch $(COMMAND_BATCH) -sustained-profiles "$(SUSTAINED_PROFILES)" -out $(SUSTAINED_OUT)
	cd bench && $(GO) run ./cmd/plotstorms -in $(SUSTAINED_OUT) -out ../docs/sustained-storms.png

.PHONY: bench-orders
bench-orders: images ## orders POST /v1/orders at 64 clients beside pgbench single-row inserts on one Postgres
	cd bench && $(GO) run ./cmd/loadgen orders -duration $(BENCH_ORDERS_DURATION) -out results/orders.txt

.PHONY: bench-dashboard
bench-dashboard: images chromium ## the dashboard in Chromium with 1,000,000 pending: first data, liveness, CPU per page (web/wasm/README.md)
	DASHBOARD_1M=1 $(GO) test -count=1 -v -timeout 40m -run '^TestMeasureDashboardWith1MPending$$' ./e2e

# STORMS is the results folder of the newest `make bench-storms`.
STORMS ?= $(lastword $(sort $(wildcard bench/results/*-storms)))

.PHONY: figures
figures: ## the storm table of docs/BENCHMARKS.md from the newest bench-storms results; the current figures into the README
	$(if $(STORMS),cd bench && $(GO) run ./cmd/stormfigures -update ../docs/BENCHMARKS.md $(STORMS:bench/%=%)/*.txt)
	$(GO) run ./scripts/figures

.PHONY: bench
bench: bench-wheel bench-timeoutd bench-storms bench-orders bench-dashboard ## every benchmark (the headline storms among them)

# Reliability and security (docs/RELIABILITY.md). The short soak also runs in
# `make test` (package e2e); the long one only here. SOAK_REPORT receives
# the auditor's figures.
FUZZTIME ?= 10s
# A count, not a duration: with a duration, go1.26's fuzz coordinator can
# report a spurious "context deadline exceeded" at the deadline under load
# (golang/go#75804, fixed in Go 1.27); a count has no deadline to race.
FUZZTIME_SHORT ?= 100000x
SOAK_REPORT ?= build/soak-report.txt

.PHONY: soak-short
soak-short: images ## short soak: 60 s at 500 orders/s under faults (timeoutd SIGKILL every 20 s, Postgres, NATS, orders), then the audit; HA=1 against the cluster
	mkdir -p $(dir $(abspath $(SOAK_REPORT))) && SOAK_HA=$(HA) SOAK_REPORT=$(abspath $(SOAK_REPORT)) $(GO) test -count=1 -timeout 15m -v -run '^TestSoak$$' ./e2e

.PHONY: soak
soak: images ## long soak: 10 min at 2,000 orders/s, deadlines 1-60 s, same faults, then the audit; HA=1 against the cluster (a random timeoutd killed each time)
	mkdir -p $(dir $(abspath $(SOAK_REPORT))) && SOAK=long SOAK_HA=$(HA) SOAK_REPORT=$(abspath $(SOAK_REPORT)) $(GO) test -count=1 -timeout 45m -v -run '^TestSoak$$' ./e2e

# make chaos: the cluster under a seeded nemesis (e2e/chaos_test.go,
# docs/RELIABILITY.md "The chaos run"). CHAOS_SEED replays a run (empty: a
# seed from the clock, printed); CHAOS_RUNS runs that many seeds in a row
# (CHAOS_SEED, +1, …), one report row each; CHAOS_KINDS replaces the mix of
# faults (comma-separated kinds, e.g. clock-skew); CHAOS_SINGLE=1 runs the
# single-instance stack under the same schedule, for the comparison;
# CHAOS_PG=patroni runs Postgres as the cluster under Patroni and adds its
# faults (primary killed, frozen, cut off; switchover; synchronous standby
# killed; etcd's leader killed) to the mix; CHAOS_PG_CLOCKS sets its members' clocks off the
# host's, one offset in seconds per member (e.g. ,+0.25,+0.5). A
# short run (40 s, 4 faults, without the hangs: frozen Postgres or NATS
# node, black-holed connections) is part of `make test`.
CHAOS_SEED ?=
CHAOS_RUNS ?= 1
CHAOS_KINDS ?=
CHAOS_REPORT ?= build/chaos-report.txt
CHAOS_DURATION ?=
CHAOS_SINGLE ?=
CHAOS_PG ?=
CHAOS_PG_CLOCKS ?=
CHAOS_TIMEOUT ?= $$((6 * $(CHAOS_RUNS) + 10))m

.PHONY: chaos
chaos: images ## the cluster under a seeded nemesis: 80 s of load, 8 faults; CHAOS_SEED=N replays, CHAOS_RUNS=10 runs 10 seeds; rows in CHAOS_REPORT
	mkdir -p $(dir $(abspath $(CHAOS_REPORT))) && CHAOS=long CHAOS_SEED=$(CHAOS_SEED) CHAOS_RUNS=$(CHAOS_RUNS) CHAOS_KINDS=$(CHAOS_KINDS) \
		CHAOS_DURATION=$(CHAOS_DURATION) CHAOS_SINGLE=$(CHAOS_SINGLE) CHAOS_PG=$(CHAOS_PG) CHAOS_PG_CLOCKS=$(CHAOS_PG_CLOCKS) CHAOS_REPORT=$(abspath $(CHAOS_REPORT)) \
		$(GO) test -count=1 -timeout $(CHAOS_TIMEOUT) -v -run '^TestChaos$$' ./e2e

# make chaos-soak: one seeded run of SOAK_MINUTES of load (default 60)
# with the long run's pace of faults, one every 10 s.
SOAK_MINUTES ?= 60
.PHONY: chaos-soak
chaos-soak: ## the cluster under the nemesis for SOAK_MINUTES (60) of load, a fault every 10 s; CHAOS_SEED=N replays
	$(MAKE) chaos CHAOS_RUNS=1 CHAOS_DURATION=$(SOAK_MINUTES)m CHAOS_TIMEOUT=$$(($(SOAK_MINUTES) + 20))m CHAOS_REPORT=build/chaos-soak-report.txt

# make sim: timeoutd's deterministic simulation (TestSimulation: the real
# core as a cluster in testing/synctest bubbles, a seeded nemesis and load,
# a checker of the invariants) for SIM_DURATION of real time from seed
# SIM_FIRST, or the one seed SIM_SEED with its history; it reports seeds per
# second and how often each fault kind was drawn. make test runs it for 90 s.
SIM_DURATION ?= 10m
SIM_FIRST ?= 1
SIM_SEED ?= 0

.PHONY: sim
sim: ## timeoutd's deterministic simulation for SIM_DURATION (10m) from seed SIM_FIRST; SIM_SEED=N replays one seed with its history
	set -o pipefail; SIM_BUDGET=$(SIM_DURATION) $(GO) test -count=1 -timeout 0 -run '^TestSimulation$$' -v ./services/timeoutd/sim \
		-sim.first=$(SIM_FIRST) -sim.seed=$(SIM_SEED) $(if $(filter-out 0,$(SIM_SEED)),-sim.history) | grep -Ev '^(=== RUN|    --- PASS)'

.PHONY: fuzz
fuzz: ## every Go fuzz target (scripts/fuzz.sh) for FUZZTIME each (default 10s)
	FUZZTIME=$(FUZZTIME) scripts/fuzz.sh

.PHONY: vuln
vuln: ## govulncheck ./... from the module proxy; skipped, saying why, when vuln.go.dev is unreachable
	@scripts/vuln.sh
