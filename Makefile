# The two commands of the README's Quick start, and a few more.
# Everything builds in the release profile only: RocksDB's C++ (~17-25 min on 2 cores the
# first time) is then built once and shared by the binary and the tests.

CARGO ?= cargo

.PHONY: demo test test-interop build deb bench-quick lab-quick arm64 test-arm64 deb-arm64 clean

demo:
	scripts/install-deps build
	$(CARGO) run --release --locked -p roamkv -- demo

test:
	scripts/install-deps test
	$(CARGO) test --release --workspace --locked
	$(MAKE) test-interop

# The EdgeX interop suite (interop/edgex; docs/SERVER.md, "Replacing core-data in an EdgeX
# deployment"): EdgeX's own Go modules (go.mod pins them, go.sum is committed) against the
# release binary and a real mosquitto, which the tests start; the app service of
# interop/edgex/appservice (app-functions-sdk-go, its own module) is built first, outside the
# suite's 180 s. EdgeX v4 needs Go >= 1.23
# (Debian's golang-go is 1.19): /usr/local/go/bin/go when it is there, else `go` on the PATH;
# scripts/install-deps says what to do when neither is new enough. GOTOOLCHAIN=local: never
# download a toolchain; -mod=readonly: go.sum must already name every module (the modules
# themselves come from the Go module proxy the first time).
GO ?= $(firstword $(wildcard /usr/local/go/bin/go) go)
INTEROP_TARGET_DIR := $(abspath $(or $(CARGO_TARGET_DIR),target))

test-interop:
	scripts/install-deps interop
	$(CARGO) build --release --locked -p roamkv
	cd interop/edgex && export GOTOOLCHAIN=local GOFLAGS="-mod=readonly -buildvcs=false" && \
	  test -z "$$($$($(GO) env GOROOT)/bin/gofmt -l .)" || { $$($(GO) env GOROOT)/bin/gofmt -l .; echo "interop/edgex: not gofmt'd" >&2; exit 1; } && \
	  $(GO) vet ./... && (cd appservice && $(GO) vet ./...) && \
	  (cd appservice && $(GO) build -o $(INTEROP_TARGET_DIR)/interop/app-interop .) && \
	  APP_INTEROP_BIN=$(INTEROP_TARGET_DIR)/interop/app-interop \
	  ROAMKV_BIN=$(INTEROP_TARGET_DIR)/release/roamkv $(GO) test -count=1 -timeout 180s ./...

build:
	scripts/install-deps build
	$(CARGO) build --release --locked -p roamkv

# The Debian package: target/debian/roamkv_<version>-1_<arch>.deb (docs/SERVER.md, "The package").
# Its binary is the server's build, without the benchmark, the lab and LevelDB
# (--no-default-features; crates/cli/Cargo.toml): scripts/package-assets copies it to
# target/release/package/ with its manual page and completions. target/release/roamkv is that
# build too until the next `make build` or `cargo test` (seconds: nothing is recompiled).
DEB_FEATURES := --no-default-features

deb:
	scripts/install-deps package
	$(CARGO) build --release --locked -p roamkv $(DEB_FEATURES)
	scripts/package-assets
	$(CARGO) deb --locked -p roamkv --no-build

bench-quick:
	scripts/install-deps bench
	$(CARGO) run --release --locked -p roamkv -- bench mobility --quick

lab-quick:
	scripts/install-deps lab
	$(CARGO) run --release --locked -p roamkv -- lab fs --quick

# ARM64 (docs/ARM64.md): the binary cross-built for aarch64 with Debian's cross gcc/g++ (RocksDB's
# C++ is the long part, 25 min on 2 cores the first time, then cached in the target directory
# beside the x86-64 build), and the engine's and the server's tests run under qemu-user, then the
# demo. The binary: $$CARGO_TARGET_DIR/aarch64-unknown-linux-gnu/release/roamkv.
ARM64_TARGET := aarch64-unknown-linux-gnu

arm64:
	scripts/install-deps arm64
	$(CARGO) build --release --locked --target $(ARM64_TARGET) -p roamkv

test-arm64:
	scripts/install-deps arm64
	$(CARGO) test --release --locked --target $(ARM64_TARGET) -p roamkv-engine -p roamkv-leveldb -p roamkv-server -p roamkv-wire -p roamkv-sink -p roamkv-export
	$(CARGO) run --release --locked --target $(ARM64_TARGET) -p roamkv -- demo

# The Debian package for arm64: $$CARGO_TARGET_DIR/debian/roamkv_<version>-1_arm64.deb.
deb-arm64:
	scripts/install-deps arm64
	scripts/install-deps package
	$(CARGO) build --release --locked --target $(ARM64_TARGET) -p roamkv $(DEB_FEATURES)
	scripts/package-assets $(ARM64_TARGET)
	$(CARGO) deb --locked -p roamkv --target $(ARM64_TARGET) --no-build

clean:
	$(CARGO) clean
