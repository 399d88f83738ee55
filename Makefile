# kubevol: the two commands of the README are `make up` and `make test` (as root).
GO ?= go
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2
TEST_TIMEOUT ?= 80m

.PHONY: all build up test deps lint cluster-binary conformance

all: build

# The deployable binary: no DWARF or symbol table, as upstream ships Kubernetes binaries.
build:
	$(GO) build -ldflags "-s -w" -o bin/kubevol ./cmd/kubevol

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
# containerd` (docs/conformance.md); not part of make test. FOCUS=<regexp> narrows it.
conformance: deps cluster-binary
	./hack/conformance/run.sh
