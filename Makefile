# kubevol: the two commands of the README are `make up` and `make test` (as root).
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 80m

.PHONY: all build binaries debs images dist push up test test-kubeletvm test-race bench deps lint vet vet-e2e staticcheck cluster-binary conformance matrix

all: build

# The version every binary and image is stamped with, and the images' tag.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
# Evaluated once: every binary of one make run carries the same version, even if the tree
# changes meanwhile (kubevol up checks that kubevol and its control plane agree).
VERSION := $(VERSION)
TAG ?= $(VERSION)
# Images are $(PREFIX)/<name>:$(TAG); `make push REGISTRY=registry.example/me` pushes them
# under that prefix instead.
PREFIX ?= ghcr.io/kubevol
PLATFORMS ?= linux/amd64 linux/arm64
OUTPUT ?= _output

# Every binary is built by hack/images with internal/build/kubevolimages.GoBuildFlags, the one definition
# of the flags (static, -trimpath, no build ID or VCS stamp, the version stamped with -X), as
# the images tests build theirs: the same source gives the same binary, so the same digests.
IMAGES_TOOL = $(GO) run ./hack/images -version=$(VERSION)

# The deployable binary, for this machine's platform.
build:
	$(IMAGES_TOOL) -binary=bin/kubevol

# One binary per image platform: $(OUTPUT)/bin/linux_<arch>/kubevol.
binaries:
	$(IMAGES_TOOL) -platforms=$(shell echo $(PLATFORMS) | tr ' ' ,) -bin-dir=$(OUTPUT)/bin -binaries

# The Debian packages of the tools in the driver and node-agent images, per architecture.
debs:
	@set -e; for p in $(PLATFORMS); do ./hack/debs.sh $${p#*/} $(OUTPUT)/debs/$${p#*/}; done

IMAGES_FLAGS = -tag=$(TAG) -platforms=$(shell echo $(PLATFORMS) | tr ' ' ,) \
	-bin-dir=$(OUTPUT)/bin -debs-dir=$(OUTPUT)/debs

# Every image for every platform, as OCI archives: $(OUTPUT)/images/<name>.oci.tar, and
# their digests in $(OUTPUT)/images/digests.txt. Import with
# `ctr images import --all-platforms $(OUTPUT)/images/csi-provisioner.oci.tar`.
images: binaries debs
	$(IMAGES_TOOL) $(IMAGES_FLAGS) -prefix=$(PREFIX) -out=$(OUTPUT)/images

# The release archives: $(OUTPUT)/dist/kubevol-$(VERSION)-linux-<arch>.tar.gz, each with
# kubevol and the control plane it runs (kubevol-cluster, built with the kubelet's overlay and
# the same flags, into $(OUTPUT)/bin/linux_<arch>/) side by side, and their SHA256SUMS
# (docs/install.md). Another architecture's control plane is a full Kubernetes build, about
# 12 CPU-minutes or more cold; `make dist PLATFORMS=linux/amd64` builds one.
dist: binaries
	$(IMAGES_TOOL) -platforms=$(shell echo $(PLATFORMS) | tr ' ' ,) -bin-dir=$(OUTPUT)/bin -dist=$(OUTPUT)/dist

# Pushes every image to $(REGISTRY)/<name>:$(TAG) with the credentials of ~/.docker/config.json.
push: binaries debs
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=<registry>/<prefix>"; exit 2; }
	$(IMAGES_TOOL) $(IMAGES_FLAGS) -prefix=$(REGISTRY) -push

up:
	$(GO) run ./cmd/kubevol up

# install-runtime-deps.sh: containerd, runc and busybox-static, for `kubevol up --runtime
# containerd` and its smoke test (test/e2e/up).
deps:
	./hack/install-deps.sh
	./hack/install-runtime-deps.sh

# gofmt, go vet and staticcheck must all be silent, in every module: the main one, the
# control plane's (cmd/kubevol-cluster, its own module for its replace lines), the embedding
# example's (examples/embed), the CRD generator's (hack/crdgen, its own module to keep
# controller-tools out of the main one), the storage e2e suite's (hack/e2e) and the CNI
# plugins' (hack/cni). staticcheck skips the control plane and hack/e2e: their few lines
# would make it analyse all of Kubernetes (10+ minutes); go vet covers them.
lint: vet vet-e2e staticcheck

vet:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	@# The control plane's module builds only with the kubelet's overlay (internal/cluster/kubeletoverlay).
	flags="$$($(GO) run ./hack/kubeletoverlay)" && cd cmd/kubevol-cluster && $(GO) vet $$flags ./...
	cd examples/embed && $(GO) vet ./...
	cd hack/crdgen && $(GO) vet ./...
	@# hack/cni has no package of its own, only upstream's plugins as tools: building them is
	@# its check (vetting upstream's code would report what only upstream can fix).
	cd hack/cni && $(GO) build tool

# The e2e.test of `make conformance` (hack/e2e): its vet compiles Kubernetes' e2e framework
# and storage specs (2,100 packages; 27 minutes beside make test's packages on two cores), so
# it is part of `make lint` but not of make test, whose cold run it would push past an hour.
vet-e2e:
	cd hack/e2e && $(GO) vet ./...

# staticcheck analyses every dependency from source, allocating as it goes: a heap five times
# its live size (GOGC=400, under 1 GiB) takes a quarter off its CPU time.
staticcheck:
	GOGC=400 $(GO) run $(STATICCHECK) ./...
	cd examples/embed && GOGC=400 $(GO) run $(STATICCHECK) ./...

# Built once, before the tests, so its progress is visible; every test package then reuses it.
cluster-binary:
	$(GO) run ./cmd/kubevol up --build-only

# test-embed.sh builds examples/embed outside the checkout as another module would, with only
# a replace line to this checkout, and runs its test on a `kubevol up` cluster.
#
# Everything under make test compiles as the shipped binaries do (static, -trimpath;
# internal/build/kubevolimages.GoBuildFlags): the test binaries, the kubevol binary the e2e tests run and
# the images tests' build then share one build cache. Without it, a cold run compiles the 1036
# packages of cmd/kubevol twice (cgo and paths change every package above net), beside the
# 1451 of the tests. Test binaries link without DWARF (-w, as the shipped ones): a third less
# link time for each of the ~100 test binaries a run links, and stack traces need none.
#
# go test runs without its own vet pass (-vet=off): make vet has already vetted every package
# and its tests with all of vet's checks, a superset of go test's. go test's pass, with its
# own set of checks and, under -race, its own compile of every package, would type-check
# every dependency again for its facts, three times over (the cluster packages, the race
# step, the kubelet adapter): as much CPU as compiling them.
test: export CGO_ENABLED := 0
test: export GOFLAGS := $(strip $(shell $(GO) env GOFLAGS) -trimpath -ldflags=-w -vet=off)
#
# The cluster packages test in `go test` (hack/test.sh), up to four at once, so that the slowest
# (verify, up, lifecycle) overlap instead of running last, alone. They wait on their clusters
# far more than they compute, so staticcheck, the embedding test, the kubelet adapter's tests
# and the unit packages (test-race) run beside them. The benchmarks run right after the
# cluster packages (AFTER_TESTS).
test: deps vet cluster-binary
	GO=$(GO) TEST_TIMEOUT=$(TEST_TIMEOUT) PACKAGES="$$($(GO) list ./... | grep $(CLUSTER_PACKAGES))" \
		AFTER_TESTS="$(MAKE) --no-print-directory bench" ./hack/test.sh "$(MAKE) --no-print-directory staticcheck" "GO=$(GO) ./hack/test-embed.sh" \
		"$(MAKE) --no-print-directory test-kubeletvm" "$(MAKE) --no-print-directory test-race"

# The kubelet adapter's unit tests: a package of the control plane's module, which builds
# only under the kubelet's overlay (internal/cluster/kubeletoverlay).
test-kubeletvm:
	flags="$$($(GO) run ./hack/kubeletoverlay)" && cd cmd/kubevol-cluster && $(GO) test $$flags -count=1 ./kubeletvm/

# Every Go benchmark once (-benchtime 1x), so that they keep building and running; one
# iteration gives a rough figure only (docs/bench.md has measured ones). Only the packages
# that have a benchmark, built without the race detector so that the figures mean something.
# Not part of a test run: -bench makes go test run the packages' binaries one at a time. The
# benchmarks under test/e2e/ are left out: each needs its package's cluster, and
# BenchmarkFailoverThroughput runs for its -failover.duration (2 min per case) whatever
# -benchtime says.
BENCH_PACKAGES = $$(git ls-files '*_test.go' | grep -v '^test/e2e/' | xargs grep -l '^func Benchmark' | xargs -n1 dirname | sort -u | sed 's|^|./|')
bench:
	$(GO) test -run '^$$' -bench . -benchtime 1x -count=1 $(BENCH_PACKAGES)

# The packages that start a real control plane or containers, each for a reason of its own:
#   test/e2e/...                  a real control plane per package
#   internal/cluster/localcluster starts a real control plane (TestStartStopRestart)
#   internal/cluster/kubeletnode  starts containerd and a pod sandbox on the host's network
# make test runs them without the race detector, which would watch the test process only,
# while their time goes to the cluster. Every other package is a unit package.
CLUSTER_PACKAGES = -e '/test/e2e/' -e '/internal/cluster/localcluster$$' -e '/internal/cluster/kubeletnode$$'

# The unit packages under the race detector: make test runs them this way only, as Kubernetes
# runs its own unit tests, so that a cold run compiles and links them once, not once with and
# once without it. The race detector needs cgo (gcc and libc6-dev, from hack/install-deps.sh),
# so this step alone sets CGO_ENABLED=1 and compiles its packages apart from the cluster
# packages': more than 12 CPU-minutes with a cold cache. The test binaries themselves run with
# CGO_ENABLED=0 (-exec env): a test that runs `go build` or `go run`
# (internal/component/snapshotter/crds runs hack/crdgen) then reuses make test's build cache
# instead of compiling its program with cgo too.
test-race:
	CGO_ENABLED=1 $(GO) test -race -count=1 -timeout 30m -exec 'env CGO_ENABLED=0' \
		$$($(GO) list ./... | grep -v $(CLUSTER_PACKAGES))

# Kubernetes' external storage e2e suite against kubevol's driver on `kubevol up --runtime
# containerd`, with kubevol's sidecars and with upstream's provisioner and snapshotter, side by
# side (docs/conformance.md); not part of make test. FOCUS=<regexp> narrows it, ROWS picks rows.
conformance: deps cluster-binary
	./hack/conformance/run.sh

# The Kubernetes compatibility matrix (README, "Kubernetes versions"): each release of
# MATRIX_VERSIONS gets its own control plane, built one after the other, and the sidecars'
# end-to-end packages run on it (hack/matrix.sh); the node agent's run on the oldest. Not part
# of make test: each release is a cold control-plane build of about 12 CPU-minutes.
matrix: deps
	GO=$(GO) ./hack/matrix.sh
