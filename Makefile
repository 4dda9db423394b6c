# nri-housekeeper — build, test, demo.
#
#   make test    everything CI runs: vet, gofmt, unit tests with -race, short
#                fuzz runs, and the end-to-end tests against a real containerd
#                (installed by the lab on first use: runc from apt, containerd
#                with go install)
#   make demo    bring up the lab containerd, run the plugin, create pods and a
#                leak, show what the plugin tracks, tear everything down
#   make bench   the benchmarks behind the performance budgets
#   make soak DURATION=30m [SEED=n]   the chaos soak (test/soak/README.md); its
#                2-minute smoke (soak-smoke) is the last step of make test
#   make install / uninstall / deb / image / helm-template   packaging (see README "Install")
SHELL := /bin/bash
GO ?= go
BIN := bin/nri-housekeeper
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X main.version=$(VERSION)
LAB := test/e2e/lab/lab.sh
E2E_TIMEOUT ?= 60m

.PHONY: all build test unit lint fuzz rules prometheus-tools e2e e2e-tools lab-install demo bench clean

all: build

build:
	$(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nri-housekeeper

test: lint unit fuzz chart image-test rules e2e soak-smoke

STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

lint:
	$(GO) vet ./...
	$(GO) vet -tags e2e,soak ./test/... ./podcgroups/
	$(GO) run $(STATICCHECK) ./...
	$(GO) run $(STATICCHECK) -tags e2e,soak ./test/... ./podcgroups/
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

unit:
	$(GO) test -race -count=1 ./...

# fuzz_run NAME,PACKAGE,COUNT fuzzes one target; it fails when PACKAGE has no
# fuzz target NAME (go test -fuzz matching none passes, fuzzing nothing).
define fuzz_run
	@[ "$$($(GO) test -list '^$(1)$$' $(2) | grep -cx '$(1)')" = 1 ] || { echo "make fuzz: no fuzz target $(1) in $(2)"; exit 1; }
	$(GO) test -run '^$$' -fuzz '^$(1)$$' -fuzztime $(or $(FUZZTIME),$(3)) $(2)
endef

# Short fuzz runs of the config parser and of the planner's safety contract
# (about 20 s each here); longer locally with make fuzz FUZZTIME=10m. By
# default they are counts, not durations: go1.26's fuzz coordinator can fail
# a run that ends mid-call with a spurious "context deadline exceeded" and no
# failing input (golang/go#75804, fixed in go1.27).
FUZZTIME ?=
fuzz:
	$(call fuzz_run,FuzzParse,./config/,300000x)
	$(call fuzz_run,FuzzPlanKeepsTheSafetyContract,./gc/,10000x)
	$(call fuzz_run,FuzzDecodeNeverPanics,./statefile/,100000x)
	# The runtime data the plugin reads: the mount table (nodefs), libcni's cache,
	# host-local's reservations, cgroup.procs, containerd's records, CRI
	# listings and NRI's reports (each found a defect when first run).
	$(call fuzz_run,FuzzParseCacheEntry,./podnet/,50000x)
	$(call fuzz_run,FuzzParseReservation,./podnet/,50000x)
	$(call fuzz_run,FuzzParseMountInfoLine,./nodefs/,50000x)
	$(call fuzz_run,FuzzParsePids,./podcgroups/,50000x)
	$(call fuzz_run,FuzzCriNetNSPath,./cri/,50000x)
	$(call fuzz_run,FuzzConvert,./cri/,50000x)
	$(call fuzz_run,FuzzMalformedNRIDataKeepsTheStateConsistent,./podstate/,10000x)

# The alerting rules: promtool checks them and runs their unit tests
# (alerts_test.yaml). prometheus-tools installs Debian's prometheus package
# (promtool, and the prometheus the e2e test runs) without starting it.
OBSERVABILITY := packaging/observability
rules: prometheus-tools
	promtool check rules $(OBSERVABILITY)/alerts.yaml
	promtool test rules $(OBSERVABILITY)/alerts_test.yaml

prometheus-tools:
	@$(OBSERVABILITY)/prometheus-tools.sh

lab-install:
	$(LAB) install

# systemd-analyze verifies the packaged unit (systemd need not be running).
e2e-tools:
	@command -v systemd-analyze >/dev/null || { apt-get update >/dev/null && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends systemd >/dev/null; }

e2e: lab-install e2e-tools prometheus-tools image
	test/e2e/lab/kubelet.sh install # a real kubelet from the Go module proxy: ~5-10 min the first time, then cached
	NRIHK_IMAGE_TAR=$(abspath $(IMAGE_TAR)) $(GO) test -tags e2e -count=1 -timeout $(E2E_TIMEOUT) -v ./test/e2e/... ./podcgroups/

# The chaos soak (test/soak/README.md), as root: a kubelet stand-in creates,
# deletes and leaks pods on the lab while containerd and the plugin are killed
# with SIGKILL and restarted, both are paused with SIGSTOP past containerd's NRI
# timeout and the pod log disk fills up; every action the plugin logs is
# checked against the stand-in's ground truth, and every leak must be
# reclaimed. The seed is printed first: SEED=<it> replays the schedule.
# soak-smoke is DURATION=2m, the last step of make test.
DURATION ?= 30m
SEED ?=
SOAK_TIMEOUT ?= 3h
.PHONY: soak soak-smoke
soak: lab-install
	SOAK_DURATION=$(DURATION) SOAK_SEED=$(SEED) $(GO) test -tags soak -count=1 -timeout $(SOAK_TIMEOUT) -v -run '^TestSoak$$' ./test/soak/

soak-smoke: DURATION = 2m
soak-smoke: SOAK_TIMEOUT = 30m
soak-smoke: soak

demo: lab-install build
	demo/run.sh

# The planner's benchmarks run in 5 interleaved rounds (a drift of the
# machine's load hits every size alike); their medians and how each doubling
# of the node scales follow, for Plan and for its floor (reading each
# object's pod and nothing else). The network side of a pass runs the same
# way, at 250 and 1,000 pods (two CNI cache entries and one reservation a
# pod) and at 1,000 with 30 leaked: a pass with the network on and off
# (cgroup v2), and the network part alone (BenchmarkNetwork: read + plan -
# plan-without-network), with its share of the pass. podnet's List needs
# root for its namespace mounts (skipped without).
NETWORK_BENCH := Pass/cgroup-v2/live=(250|1000)$$/leaked=(0|30)$$/|Network
NETWORK_SHARE := { print; n = $$1; sub(/-[0-9]+$$/, "", n); ms[n] = $$3 } \
	END { split("live=250/leaked=0 live=1000/leaked=0 live=1000/leaked=30", sizes, " "); \
	for (i = 1; i in sizes; i++) { s = sizes[i]; off = ms["BenchmarkPass/cgroup-v2/" s "/network=off"]; \
	on = ms["BenchmarkPass/cgroup-v2/" s "/network=on"]; if (on == 0) continue; \
	part = ms["BenchmarkNetwork/" s "/read"] + ms["BenchmarkNetwork/" s "/plan"] - ms["BenchmarkNetwork/" s "/plan-without-network"]; \
	printf "%-19s pass off %7.2f ms, on %7.2f ms (on - off %7.2f ms); network part %7.2f ms, %4.1f%% of the pass\n", \
	s, off, on, on - off, part, 100 * part / on } }
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./podstate/ ./plugin/ ./podnet/
	$(GO) test -run '^$$' -bench 'Pass|Gather' -benchmem ./housekeeping/
	$(GO) test -c -o bin/gc.test ./gc/
	for round in 1 2 3 4 5; do bin/gc.test -test.run '^$$' -test.bench 'Plan|ReadPod' -test.benchmem; done > bin/gc-bench.txt
	cat bin/gc-bench.txt
	awk -f test/bench/ratio.awk bin/gc-bench.txt
	$(GO) test -c -o bin/housekeeping.test ./housekeeping/
	for round in 1 2 3 4 5; do bin/housekeeping.test -test.run '^$$' -test.bench '$(NETWORK_BENCH)' -test.benchmem; done > bin/network-bench.txt
	cat bin/network-bench.txt
	awk -f test/bench/ratio.awk bin/network-bench.txt | awk '$(NETWORK_SHARE)'

# The plugin's cost on the real lab (takes ~30 min, as root): a pass beside
# the bare CRI listing with 300 live pods (and 30 leaked pod cgroups), idle
# CPU at a 30 s and a 2 s period, pod lifecycle latency with the plugin on
# and off, and 300 leaked pods reclaimed by one pass vs a serial loop, with
# where containerd's removals wait (its goroutine profile, on its debug
# socket in the lab's dir, which lab down removes). NRIHK_BENCH_PODS=0: the
# same on an empty node.
BENCH_DEBUG_SOCKET ?= /tmp/nrihk-e2e/containerd-debug.sock
.PHONY: bench-lab
bench-lab: lab-install
	LAB_DEBUG_ADDRESS=$(BENCH_DEBUG_SOCKET) $(GO) test -tags e2e -count=1 -run '^$$' -bench Lab -benchtime 1x -timeout 90m -v ./test/e2e/

IMAGE_TAR ?= bin/nri-housekeeper-image.tar
HELM_VERSION ?= v3.22.0
CHART := packaging/helm/nri-housekeeper
.PHONY: image image-test chart helm-template daemonset-manifest

# The container image without a container engine: static binary in an OCI image-layout
# tarball (ctr images import, nerdctl/podman load, skopeo copy oci-archive:...).
# PLATFORMS="linux/amd64 linux/arm64" for a multi-arch image.
image:
	VERSION=$(VERSION) packaging/image/build.sh $(IMAGE_TAR)

# The image builder's tests (own Go module, so go-containerregistry stays out of go.mod).
image-test:
	cd packaging/image && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) test -count=1 ./...

# Chart tests (own Go module, so Helm stays out of go.mod): helm-template render, API schema
# checks, DaemonSet checks, helm lint, daemonset.yaml == render.
chart:
	cd packaging/helm && $(GO) vet ./... && $(GO) run $(STATICCHECK) ./... && $(GO) test -count=1 ./...

helm-template:
	$(GO) run helm.sh/helm/v3/cmd/helm@$(HELM_VERSION) template nri-housekeeper $(CHART) --namespace kube-system

daemonset-manifest:
	cd packaging/helm && $(GO) test -count=1 -run Manifest -update .

# Pre-registered NRI plugin (packaging/install/install.sh): the binary as
# $(DESTDIR)$(PLUGIN_DIR)/$(NAME), its config as $(DESTDIR)$(CONF_DIR)/$(NAME).conf
# (on an upgrade an unedited config is replaced; an edited one is kept once the
# new binary accepts it, the new one written next to it as .example).
# NAME must be NN-name. `=` not `?=` for NAME: a NAME in the environment
# must not pick the file name; `make install NAME=...` does.
DESTDIR ?=
PLUGIN_DIR ?= /opt/nri/plugins
CONF_DIR ?= /etc/nri/conf.d
NAME = 10-nri-housekeeper
INSTALL_VARS = DESTDIR='$(DESTDIR)' PLUGIN_DIR='$(PLUGIN_DIR)' CONF_DIR='$(CONF_DIR)' NAME='$(NAME)' BINARY='$(BIN)'

.PHONY: install uninstall deb

install: build
	packaging/install/install.sh install $(INSTALL_VARS)

uninstall:
	packaging/install/install.sh uninstall $(INSTALL_VARS)

# Debian package (external mode: binary, systemd unit, config) into bin/.
deb:
	VERSION='$(VERSION)' GO='$(GO)' packaging/deb/build.sh bin

clean:
	rm -rf bin
