# The two commands of the README's Quick start, and a few more.
# Everything builds in the release profile only: RocksDB's C++ (~17-25 min on 2 cores the
# first time) is then built once and shared by the binary and the tests.

CARGO ?= cargo

.PHONY: demo test build deb bench-quick lab-quick clean

demo:
	scripts/install-deps build
	$(CARGO) run --release --locked -p roamkv -- demo

test:
	scripts/install-deps test
	$(CARGO) test --release --workspace --locked

build:
	scripts/install-deps build
	$(CARGO) build --release --locked -p roamkv

# The Debian package: target/debian/roamkv_<version>-1_<arch>.deb (docs/SERVER.md, "The package").
deb:
	scripts/install-deps package
	$(CARGO) build --release --locked -p roamkv
	scripts/package-assets
	$(CARGO) deb --locked -p roamkv

bench-quick:
	scripts/install-deps bench
	$(CARGO) run --release --locked -p roamkv -- bench mobility --quick

lab-quick:
	scripts/install-deps lab
	$(CARGO) run --release --locked -p roamkv -- lab fs --quick

clean:
	$(CARGO) clean
