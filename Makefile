# kubevol: the two commands of the README are `make up` and `make test` (as root).
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 80m

.PHONY: all build binaries debs images push up test deps lint cluster-binary conformance

all: build

# The version every binary and image is stamped with, and the images' tag.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo devel)
TAG ?= $(VERSION)
# Images are $(PREFIX)/<name>:$(TAG); `make push REGISTRY=registry.example/me` pushes them
# under that prefix instead.
PREFIX ?= ghcr.io/kubevol
PLATFORMS ?= linux/amd64 linux/arm64
OUTPUT ?= _output

# Static and reproducible: no cgo, no paths of this machine (-trimpath), no build ID, no VCS
# stamp (the version is stamped with -X), no DWARF or symbol table, as upstream ships its
# sidecars. The same source gives the same binary, so the same image digests.
GO_BUILD_ENV := CGO_ENABLED=0
GO_BUILD_FLAGS := -trimpath -buildvcs=false -ldflags "-s -w -buildid= -X github.com/kubevol/kubevol/internal/version.Version=$(VERSION)"

# The deployable binary, for this machine's platform.
build:
	$(GO_BUILD_ENV) $(GO) build $(GO_BUILD_FLAGS) -o bin/kubevol ./cmd/kubevol

# One binary per image platform: $(OUTPUT)/bin/linux_<arch>/kubevol.
binaries:
	@set -e; for p in $(PLATFORMS); do \
	  os=$${p%%/*}; arch=$${p#*/}; \
	  echo "go build $$os/$$arch"; \
	  $(GO_BUILD_ENV) GOOS=$$os GOARCH=$$arch $(GO) build $(GO_BUILD_FLAGS) -o $(OUTPUT)/bin/$${os}_$$arch/kubevol ./cmd/kubevol; \
	done

# The Debian packages of the tools in the driver and node-agent images, per architecture.
debs:
	@set -e; for p in $(PLATFORMS); do ./hack/debs.sh $${p#*/} $(OUTPUT)/debs/$${p#*/}; done

IMAGES_FLAGS = -version=$(VERSION) -tag=$(TAG) -platforms=$(shell echo $(PLATFORMS) | tr ' ' ,) \
	-bin-dir=$(OUTPUT)/bin -debs-dir=$(OUTPUT)/debs

# Every image for every platform, as OCI archives: $(OUTPUT)/images/<name>.oci.tar, and
# their digests in $(OUTPUT)/images/digests.txt. Import with
# `ctr images import --all-platforms $(OUTPUT)/images/csi-provisioner.oci.tar`.
images: binaries debs
	$(GO) run ./hack/images $(IMAGES_FLAGS) -prefix=$(PREFIX) -out=$(OUTPUT)/images

# Pushes every image to $(REGISTRY)/<name>:$(TAG) with the credentials of ~/.docker/config.json.
push: binaries debs
	@test -n "$(REGISTRY)" || { echo "make push REGISTRY=<registry>/<prefix>"; exit 2; }
	$(GO) run ./hack/images $(IMAGES_FLAGS) -prefix=$(REGISTRY) -push

up:
	$(GO) run ./cmd/kubevol up

# install-runtime-deps.sh: containerd, runc and busybox-static, for `kubevol up --runtime
# containerd` and its smoke test (test/e2e/up).
deps:
	./hack/install-deps.sh
	./hack/install-runtime-deps.sh

# gofmt, go vet and staticcheck must all be silent, in every module: the main one, the
# control plane's (cmd/kubevol-cluster, its own module for its replace lines), the embedding
# example's (examples/embed) and the CRD generator's (hack/crdgen, its own module to keep
# controller-tools out of the main one). staticcheck skips the control plane: that 40-line
# main would make it analyse all of Kubernetes (10+ minutes); go vet covers it.
lint:
	@out="$$(gofmt -l $$(git ls-files '*.go'))"; if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet ./...
	cd cmd/kubevol-cluster && $(GO) vet ./...
	cd examples/embed && $(GO) vet ./...
	cd hack/crdgen && $(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	cd examples/embed && $(GO) run $(STATICCHECK) ./...

# Built once, before the tests, so its progress is visible; every test package then reuses it.
cluster-binary:
	$(GO) run ./cmd/kubevol up --build-only

# test-embed.sh builds examples/embed outside the checkout as another module would, with only
# a replace line to this checkout, and runs its test on a `kubevol up` cluster.
test: deps lint cluster-binary
	$(GO) test -count=1 -timeout $(TEST_TIMEOUT) ./...
	GO=$(GO) ./hack/test-embed.sh

# Kubernetes' external storage e2e suite against kubevol's driver on `kubevol up --runtime
# containerd`, with kubevol's sidecars and with upstream's provisioner and snapshotter, side by
# side (docs/conformance.md); not part of make test. FOCUS=<regexp> narrows it, ROWS picks rows.
conformance: deps cluster-binary
	./hack/conformance/run.sh
