fn main() {
    // Debian's libleveldb-dev (the real Google LevelDB, 1.23). `tests/run` installs it.
    println!("cargo:rustc-link-lib=leveldb");
    println!("cargo:rerun-if-changed=build.rs");
}
