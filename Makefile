# mcsd — Kubernetes Multi-Cluster Services: export, import, clusterset DNS
# and an nftables data plane for ClusterSetIPs.
#
#   make demo       start a broker and two clusters on this machine (root)
#   make kubectl-mcs    the operator's CLI, bin/kubectl-mcs (kubectl mcs once on PATH)
#   make test       every test: unit, real API servers, real kernel, real kubelets (root)
#   make test-unit  fast tests only: no root, no harness
#   make bench-proxier  proxier sync times and latency vs kube-proxy and nft -f; a dead cluster (root)
#   make bench-dns      DNS queries per second, latency and answers vs CoreDNS and a minimal responder (root)
#   make bench-e2e      export -> resolvable -> reachable latency across clusters (root)
#   make bench-scale    the control plane at 3x10k and 50x1k services (root)
#   make bench-bulk     200 services exported at once, three clusters, beside a plain writer (root)
#   make bench-gate     the DNS gate's writes, watch events and release time at 100 and 500 nodes (root)
#   make image      the mcsd container image as an archive, bin/mcsd-image.tar (IMAGE=...; no Docker)
#   make image-docker   the same image from the Dockerfile, with a Docker engine
#   make test-images    the images the real-node tests run (pause, CoreDNS, echo, mcsd), cached
#   make version    the version stamped into binaries and image tags
#   make test-kind  two kind clusters, a smoke test and mcs-api conformance (Docker, kind)

SHELL := /bin/bash
GO ?= go
# Pinned generators, run through the module proxy.
CONTROLLER_GEN := $(GO) run sigs.k8s.io/controller-tools/cmd/controller-gen@v0.19.0
DEEPCOPY_GEN := $(GO) run k8s.io/code-generator/cmd/deepcopy-gen@v0.36.3
# Built Kubernetes components and tools, keyed by version (gitignored).
export MCSD_CACHE ?= $(CURDIR)/.cache
# Per package binary: test/realnode runs TestRealNodes and TestDocs, each on
# a clusterset of its own, one after the other.
TEST_TIMEOUT ?= 50m

# The version stamped into the binary (mcsd --version, the mcsd_build_info
# metric) and the image tag: `git describe` of the source, such as v0.1.0,
# v0.1.0-3-g1a2b3c4 (three commits past the tag) or 1a2b3c4-dirty (no tag
# yet, uncommitted changes). Override with VERSION=... for a release.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)
REVISION ?= $(shell git rev-parse HEAD 2>/dev/null || echo unknown)
VERSION_PKG := github.com/mcsd-io/mcsd/internal/version
LDFLAGS := -X $(VERSION_PKG).version=$(VERSION) -X $(VERSION_PKG).revision=$(REVISION)
FUZZ_TIME ?= 20s

.PHONY: all build version test test-unit test-integration lint verify generate manifests verify-manifests \
        harness-binaries node-binaries coredns helm fuzz bench bench-proxier bench-e2e demo clean help

all: build

help:
	@sed -n 's/^#   //p' Makefile

version:
	@echo $(VERSION)

build:
	$(GO) build ./...
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/mcsd ./cmd/mcsd
	$(GO) build -o bin/clusterset ./test/cmd/clusterset

# The operator's CLI: a kubectl plugin (kubectl mcs ...) once bin/ is on
# PATH, or run on its own.
.PHONY: kubectl-mcs
kubectl-mcs:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/kubectl-mcs ./cmd/kubectl-mcs

# The Kubernetes components the harness runs; built once per version.
harness-binaries:
	bash test/tools/build.sh $(MCSD_CACHE)/k8s

# What the harness's real nodes run besides (test/lib/harness RealNodes, the
# tests of test/realnode): kubelet, kube-scheduler, kube-proxy, kubectl for
# the operator's commands, and containerd; built once per version, here
# before the tests so that a first build does not eat into a test binary's
# timeout. runc and the CNI plugins are Debian's.
.PHONY: node-binaries
node-binaries:
	bash test/tools/build.sh $(MCSD_CACHE)/k8s kubelet kube-scheduler kube-proxy kubectl >/dev/null
	bash test/tools/containerd/build.sh $(MCSD_CACHE)/containerd >/dev/null

# kind at the version test/tools/kind pins, for the kind tests on machines
# without one; built once per version.
.PHONY: kind-binary
kind-binary:
	bash test/tools/kind/build.sh $(MCSD_CACHE)/kind >/dev/null

test: verify harness-binaries node-binaries coredns helm test-images fuzz go-test test-kind

# The Go tests alone, once everything they build on is there (make test),
# but the kind clusters' test, which test-kind runs next: its two clusters
# and the real-node suite are each as much as this machine's cores carry.
.PHONY: go-test
go-test:
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) -skip '^TestKind' ./...

# The pinned CoreDNS: cluster1's own DNS in the e2e tests and the peer of
# bench-dns. Built here, before the tests, so its first build does not eat
# into a test binary's timeout.
coredns:
	bash test/tools/coredns/build.sh $(MCSD_CACHE)/coredns >/dev/null

# helm of the version go.mod requires, for the docs test's Helm page
# (test/realnode TestDocs), into the path the test looks in. Built here,
# before the tests, so that its first build (minutes: helm's own module
# graph) does not eat into a test binary's timeout.
.PHONY: helm
helm:
	bash test/tools/helm/build.sh $(MCSD_CACHE)/helm >/dev/null

# The images the real-node tests import into their nodes' containerd
# (test/lib/images): pause, CoreDNS, the echo server and mcsd tagged with
# VERSION, built without Docker into $(MCSD_CACHE)/images once, here before
# the tests so that a first build does not eat into a test binary's timeout.
.PHONY: test-images
test-images: coredns
	$(GO) run ./test/cmd/images -mcsd-tags $(VERSION)

# The DNS server's request path against random queries for FUZZ_TIME; an
# input that fails is kept under dns/testdata/fuzz/ and replayed by go test.
.PHONY: fuzz
fuzz:
	$(GO) test ./dns -run '^$$' -fuzz FuzzServeDNS -fuzztime $(FUZZ_TIME)

test-unit:
	$(GO) test -short -count=1 ./...

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...

# Everything that must hold before tests mean anything: formatting, vet,
# and generated files that match their sources.
verify: lint verify-manifests verify-layout verify-rules

# The alert rules are valid, and promtool's tests of them (each alert fires
# on its fault and clears) pass. promtool: Debian's package prometheus.
.PHONY: verify-rules
verify-rules:
	promtool check rules charts/mcsd/files/prometheus-rules.yaml
	cd charts/mcsd/files && promtool test rules prometheus-rules.test.yaml

# The README's Layout and docs/architecture.md list every package as the
# tree has it.
.PHONY: verify-layout
verify-layout:
	$(GO) test -count=1 ./test/layout/

generate:
	$(DEEPCOPY_GEN) --go-header-file hack/boilerplate.go.txt --output-file zz_generated.deepcopy.go ./apis/about/v1alpha1 ./apis/about/v1beta1

# CRDs: ClusterProperty from apis/about, the mcs-api ones exactly as the
# sigs.k8s.io/mcs-api module ships them; the Helm chart's crds/ the same
# files. manifests/mcsd: the chart charts/mcsd rendered with its default
# values (hack/manifests), so the chart is the one place to edit mcsd's
# member objects.
manifests:
	$(CONTROLLER_GEN) crd:crdVersions=v1 paths=./apis/... output:crd:artifacts:config=manifests/crds
	mcs=$$($(GO) list -m -f '{{.Dir}}' sigs.k8s.io/mcs-api) && \
	  for f in multicluster.x-k8s.io_serviceexports.yaml multicluster.x-k8s.io_serviceimports.yaml; do \
	    install -m 0644 $$mcs/config/crd/$$f manifests/crds/$$f; done
	rm -f charts/mcsd/crds/*.yaml && \
	  for f in manifests/crds/*.yaml; do [ "$$(basename $$f)" = kustomization.yaml ] || install -m 0644 $$f charts/mcsd/crds/; done
	$(GO) run ./hack/manifests -dir manifests/mcsd

# The generated files match their sources, and the chart passes Helm's
# lint (its Go library: no helm binary needed).
verify-manifests:
	@tmp=$$(mktemp -d) && trap 'rm -rf $$tmp' EXIT && \
	  for d in manifests/crds manifests/mcsd charts/mcsd/crds; do mkdir -p $$tmp/before/$$d && cp -r $$d/. $$tmp/before/$$d; done && \
	  $(MAKE) --no-print-directory -s manifests >/dev/null && \
	  for d in manifests/crds manifests/mcsd charts/mcsd/crds; do \
	    if ! diff -r $$tmp/before/$$d $$d; then echo "$$d is stale: run make manifests and commit"; exit 1; fi; done
	$(GO) test -count=1 ./charts -run 'TestChartPassesHelmLint'

bench: harness-binaries
	$(GO) test -run '^$$' -bench . -benchtime 1x -count=1 -timeout $(TEST_TIMEOUT) ./...

# The proxier's sync times with the real nft at 1k, 10k and 30k
# ServiceImports (PROXIER_BENCH_SIZES), side by side with kube-proxy in
# nftables mode and with nft -f of the same input, first-packet connect
# latency, and a dead cluster's departure (PROXIER_BENCH_DEAD_CLUSTER);
# prints numbers only (root).
bench-proxier: harness-binaries
	PROXIER_BENCH_KUBE_PROXY=$$(bash test/tools/build.sh $(MCSD_CACHE)/k8s kube-proxy)/kube-proxy \
	  $(GO) run ./test/cmd/proxierbench

# mcsd's DNS server and CoreDNS's multicluster mode on the same data and the
# same load, each pinned to one core; CoreDNS is built once per version.
BENCH_DNS_TIME ?= 10s
.PHONY: bench-dns
bench-dns: harness-binaries
	dir=$$(bash test/tools/coredns/build.sh $(MCSD_CACHE)/coredns) && \
	  $(GO) run ./test/cmd/dnsbench -coredns $$dir/coredns -duration $(BENCH_DNS_TIME)

# Export -> resolvable -> reachable latency in another cluster, with real
# mcsd processes (root).
bench-e2e: harness-binaries
	$(GO) test -run '^$$' -bench BenchmarkExportToReachable -benchtime 1x -count=1 -timeout $(TEST_TIMEOUT) ./test/e2e/

# The control plane at clusterset scale: simulated clusters writing to a
# real broker, one mcsd with its default settings importing; prints a table
# of convergence, writes, memory, broker flip and dead-cluster drop times
# for each MCSD_SCALE scenario (clusters x services x endpoints) (root).
MCSD_SCALE ?= 3x10000x1,50x1000x10
MCSD_BULK ?= 200
.PHONY: bench-scale
bench-scale: harness-binaries
	MCSD_SCALE=$(MCSD_SCALE) MCSD_SCALE_KUBE_PROXY=$$(bash test/tools/build.sh $(MCSD_CACHE)/k8s kube-proxy)/kube-proxy \
	  $(GO) test -run '^$$' -bench BenchmarkClusterset -benchtime 1x -count=1 -timeout 90m ./test/scale/

# MCSD_BULK ServiceExports (default 200) created at once in one of three
# clusters, each with an mcsd, per stage, beside a plain writer (root).
.PHONY: bench-bulk
bench-bulk: harness-binaries
	MCSD_BULK=$(MCSD_BULK) $(GO) test -run '^$$' -bench BenchmarkBulkExport -benchtime 1x -count=1 -timeout 40m ./test/scale/

# The DNS gate's cost per batch of new ClusterSetIPs (MCSD_GATE_BATCH, 40)
# with MCSD_GATE_NODES simulated nodes: one process per node running the
# gate's report writer and summary watcher, and the controller's
# aggregator; prints Lease writes, watch events, API server CPU and the
# time until every node may hand each ClusterSetIP out (root).
MCSD_GATE_NODES ?= 100,500
MCSD_GATE_BATCH ?= 40
.PHONY: bench-gate
bench-gate: harness-binaries
	MCSD_GATE_NODES=$(MCSD_GATE_NODES) MCSD_GATE_BATCH=$(MCSD_GATE_BATCH) \
	  $(GO) test -run '^$$' -bench BenchmarkDNSGate -benchtime 1x -count=1 -timeout 90m ./test/scale/

# A broker, two clusters and one mcsd each; an app exported from cluster2,
# reached by name and ClusterSetIP from cluster1, then scaled into cluster1.
demo: harness-binaries
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/mcsd ./cmd/mcsd
	$(GO) build -o bin/demo ./test/cmd/demo
	MCSD_BINARY=$(CURDIR)/bin/mcsd ./bin/demo

# The node daemon's container image, tagged with VERSION and stamped with
# it: the stamped static binary on Debian bookworm-slim with nft and
# iptables, built without Docker (hack/image; the Debian root filesystem
# comes from mmdebstrap and is kept in MCSD_CACHE) and written as an archive,
# IMAGE_TAR, holding IMAGE. Load it on a node with
# `ctr -n k8s.io images import bin/mcsd-image.tar`, or push it to a registry
# of yours (crane push bin/mcsd-image.tar registry.example.com/mcsd:TAG) and
# point manifests/mcsd at it with kustomize's images: (README).
# image-docker builds the same image from the Dockerfile with a Docker
# engine. Nothing publishes images yet.
IMAGE_REPO ?= localhost/mcsd
IMAGE ?= $(IMAGE_REPO):$(VERSION)
IMAGE_TAR ?= bin/mcsd-image.tar
.PHONY: image image-docker
image:
	$(GO) run ./hack/image -version $(VERSION) -revision $(REVISION) -image $(IMAGE) -o $(IMAGE_TAR)

image-docker:
	docker build --build-arg VERSION=$(VERSION) --build-arg REVISION=$(REVISION) -t $(IMAGE) .

# Two kind clusters joined by mcsd with test/kind's scripts, e2e.sh's smoke
# test and every conformance spec (go test ./test/kind, also in make
# test): the machine's Docker engine, or a private dockerd (root), and a
# node image built here. Stops, naming what is missing, where it cannot run.
.PHONY: test-kind
test-kind: kind-binary
	MCSD_KIND_REQUIRED=1 $(GO) test -count=1 -v -timeout 60m -run 'TestKind' ./test/kind/

clean:
	-$(GO) run ./test/cmd/clusterset down
	rm -rf bin
