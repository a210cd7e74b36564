//! Minimal safe bindings to Google LevelDB's C API (`leveldb/c.h`).
//!
//! Why our own bindings (this one file) instead of the `leveldb` crate: that crate is
//! unmaintained, bundles LevelDB 1.22 and fails to build under gcc (its `-Wthread-safety` flags;
//! it builds only with clang). Debian's `libleveldb-dev` is the real Google LevelDB (1.23) and
//! links in seconds. Only what roamkv's lower tier and the benchmark's plain
//! LevelDB baseline need is bound.

use std::ffi::{CStr, CString, c_char, c_int, c_uchar, c_void};
use std::fmt;
use std::path::Path;
use std::ptr;

#[allow(non_camel_case_types)]
mod ffi {
    use super::*;
    pub enum leveldb_t {}
    pub enum leveldb_options_t {}
    pub enum leveldb_readoptions_t {}
    pub enum leveldb_writeoptions_t {}
    pub enum leveldb_writebatch_t {}
    pub enum leveldb_iterator_t {}
    pub enum leveldb_cache_t {}
    pub enum leveldb_filterpolicy_t {}

    unsafe extern "C" {
        pub fn leveldb_open(
            options: *const leveldb_options_t,
            name: *const c_char,
            errptr: *mut *mut c_char,
        ) -> *mut leveldb_t;
        pub fn leveldb_close(db: *mut leveldb_t);
        pub fn leveldb_put(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            val: *const c_char,
            vallen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_delete(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            key: *const c_char,
            keylen: usize,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_write(
            db: *mut leveldb_t,
            options: *const leveldb_writeoptions_t,
            batch: *mut leveldb_writebatch_t,
            errptr: *mut *mut c_char,
        );
        pub fn leveldb_get(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
            key: *const c_char,
            keylen: usize,
            vallen: *mut usize,
            errptr: *mut *mut c_char,
        ) -> *mut c_char;
        pub fn leveldb_create_iterator(
            db: *mut leveldb_t,
            options: *const leveldb_readoptions_t,
        ) -> *mut leveldb_iterator_t;
        pub fn leveldb_property_value(db: *mut leveldb_t, propname: *const c_char) -> *mut c_char;
        pub fn leveldb_approximate_sizes(
            db: *mut leveldb_t,
            num_ranges: c_int,
            range_start_key: *const *const c_char,
            range_start_key_len: *const usize,
            range_limit_key: *const *const c_char,
            range_limit_key_len: *const usize,
            sizes: *mut u64,
        );
        pub fn leveldb_compact_range(
            db: *mut leveldb_t,
            start_key: *const c_char,
            start_key_len: usize,
            limit_key: *const c_char,
            limit_key_len: usize,
        );

        pub fn leveldb_iter_destroy(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_valid(it: *const leveldb_iterator_t) -> c_uchar;
        pub fn leveldb_iter_seek_to_first(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_seek(it: *mut leveldb_iterator_t, k: *const c_char, klen: usize);
        pub fn leveldb_iter_next(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_prev(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_seek_to_last(it: *mut leveldb_iterator_t);
        pub fn leveldb_iter_key(it: *const leveldb_iterator_t, klen: *mut usize) -> *const c_char;
        pub fn leveldb_iter_value(it: *const leveldb_iterator_t, vlen: *mut usize)
        -> *const c_char;
        pub fn leveldb_iter_get_error(it: *const leveldb_iterator_t, errptr: *mut *mut c_char);

        pub fn leveldb_writebatch_create() -> *mut leveldb_writebatch_t;
        pub fn leveldb_writebatch_destroy(b: *mut leveldb_writebatch_t);
        pub fn leveldb_writebatch_clear(b: *mut leveldb_writebatch_t);
        pub fn leveldb_writebatch_put(
            b: *mut leveldb_writebatch_t,
            key: *const c_char,
            klen: usize,
            val: *const c_char,
            vlen: usize,
        );
        pub fn leveldb_writebatch_delete(
            b: *mut leveldb_writebatch_t,
            key: *const c_char,
            klen: usize,
        );

        pub fn leveldb_options_create() -> *mut leveldb_options_t;
        pub fn leveldb_options_destroy(o: *mut leveldb_options_t);
        pub fn leveldb_options_set_create_if_missing(o: *mut leveldb_options_t, v: c_uchar);
        pub fn leveldb_options_set_write_buffer_size(o: *mut leveldb_options_t, s: usize);
        pub fn leveldb_options_set_max_open_files(o: *mut leveldb_options_t, n: c_int);
        pub fn leveldb_options_set_cache(o: *mut leveldb_options_t, c: *mut leveldb_cache_t);
        pub fn leveldb_options_set_compression(o: *mut leveldb_options_t, v: c_int);
        pub fn leveldb_options_set_filter_policy(
            o: *mut leveldb_options_t,
            p: *mut leveldb_filterpolicy_t,
        );
        pub fn leveldb_options_set_max_file_size(o: *mut leveldb_options_t, s: usize);

        pub fn leveldb_cache_create_lru(capacity: usize) -> *mut leveldb_cache_t;
        pub fn leveldb_cache_destroy(c: *mut leveldb_cache_t);
        pub fn leveldb_filterpolicy_create_bloom(
            bits_per_key: c_int,
        ) -> *mut leveldb_filterpolicy_t;
        pub fn leveldb_filterpolicy_destroy(p: *mut leveldb_filterpolicy_t);

        pub fn leveldb_readoptions_create() -> *mut leveldb_readoptions_t;
        pub fn leveldb_readoptions_destroy(o: *mut leveldb_readoptions_t);
        pub fn leveldb_writeoptions_create() -> *mut leveldb_writeoptions_t;
        pub fn leveldb_writeoptions_destroy(o: *mut leveldb_writeoptions_t);
        pub fn leveldb_writeoptions_set_sync(o: *mut leveldb_writeoptions_t, v: c_uchar);

        pub fn leveldb_free(ptr: *mut c_void);
    }
}

/// An error reported by LevelDB (its status string), or a path that cannot be passed to C.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Error(pub String);

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "leveldb: {}", self.0)
    }
}
impl std::error::Error for Error {}

/// Takes ownership of a LevelDB error string (if any) and turns it into a `Result`.
fn check(err: *mut c_char) -> Result<(), Error> {
    if err.is_null() {
        return Ok(());
    }
    // SAFETY: LevelDB hands us a NUL-terminated malloc'd string that we must free with leveldb_free.
    let message = unsafe { CStr::from_ptr(err) }
        .to_string_lossy()
        .into_owned();
    // SAFETY: `err` came from LevelDB, is freed exactly once, and is not used afterwards.
    unsafe { ffi::leveldb_free(err.cast()) };
    Err(Error(message))
}

/// Open options. Defaults follow LevelDB's own except compression, which is off: roamkv's
/// payloads are sensor readings the caller may already have compressed, and the benchmark's
/// values are random bytes.
#[derive(Debug, Clone)]
pub struct Options {
    pub create_if_missing: bool,
    pub write_buffer_bytes: usize,
    pub block_cache_bytes: usize,
    pub max_open_files: i32,
    pub max_file_bytes: usize,
    pub compression: bool,
    /// Bloom filter bits per key; 0 = no filter (LevelDB's default).
    pub bloom_bits_per_key: i32,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            create_if_missing: true,
            write_buffer_bytes: 4 << 20,
            block_cache_bytes: 8 << 20,
            max_open_files: 1000,
            max_file_bytes: 2 << 20,
            compression: false,
            bloom_bits_per_key: 10,
        }
    }
}

/// An open LevelDB database. LevelDB's `DB` is safe for concurrent use from many threads.
pub struct Db {
    db: *mut ffi::leveldb_t,
    options: *mut ffi::leveldb_options_t,
    cache: *mut ffi::leveldb_cache_t,
    filter: *mut ffi::leveldb_filterpolicy_t,
    read_options: *mut ffi::leveldb_readoptions_t,
    write_async: *mut ffi::leveldb_writeoptions_t,
    write_sync: *mut ffi::leveldb_writeoptions_t,
}

// SAFETY: leveldb::DB is documented thread-safe; the option objects are immutable after open.
unsafe impl Send for Db {}
// SAFETY: as for Send: concurrent calls on one leveldb::DB are safe, and nothing here mutates
// the option objects after open.
unsafe impl Sync for Db {}

impl Db {
    pub fn open(path: &Path, options: &Options) -> Result<Db, Error> {
        let name = CString::new(path.as_os_str().as_encoded_bytes())
            .map_err(|_| Error(format!("path {} contains a NUL byte", path.display())))?;
        // SAFETY: plain constructor calls; every pointer is owned by the returned Db and freed in Drop.
        unsafe {
            let opts = ffi::leveldb_options_create();
            ffi::leveldb_options_set_create_if_missing(opts, options.create_if_missing as c_uchar);
            ffi::leveldb_options_set_write_buffer_size(opts, options.write_buffer_bytes);
            ffi::leveldb_options_set_max_open_files(opts, options.max_open_files);
            ffi::leveldb_options_set_max_file_size(opts, options.max_file_bytes);
            // leveldb_no_compression = 0, leveldb_snappy_compression = 1
            ffi::leveldb_options_set_compression(opts, options.compression as c_int);
            let cache = ffi::leveldb_cache_create_lru(options.block_cache_bytes);
            ffi::leveldb_options_set_cache(opts, cache);
            let filter = if options.bloom_bits_per_key > 0 {
                let f = ffi::leveldb_filterpolicy_create_bloom(options.bloom_bits_per_key);
                ffi::leveldb_options_set_filter_policy(opts, f);
                f
            } else {
                ptr::null_mut()
            };
            let mut err = ptr::null_mut();
            let db = ffi::leveldb_open(opts, name.as_ptr(), &mut err);
            let write_sync = ffi::leveldb_writeoptions_create();
            ffi::leveldb_writeoptions_set_sync(write_sync, 1);
            let handle = Db {
                db,
                options: opts,
                cache,
                filter,
                read_options: ffi::leveldb_readoptions_create(),
                write_async: ffi::leveldb_writeoptions_create(),
                write_sync,
            };
            check(err)?; // on error, Drop frees the options (db is null)
            Ok(handle)
        }
    }

    fn write_options(&self, sync: bool) -> *const ffi::leveldb_writeoptions_t {
        if sync {
            self.write_sync
        } else {
            self.write_async
        }
    }

    /// `sync = true` makes LevelDB fsync its log before returning.
    pub fn put(&self, key: &[u8], value: &[u8], sync: bool) -> Result<(), Error> {
        let mut err = ptr::null_mut();
        // SAFETY: key/value are valid for the call; LevelDB copies them.
        unsafe {
            ffi::leveldb_put(
                self.db,
                self.write_options(sync),
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
                &mut err,
            )
        };
        check(err)
    }

    pub fn delete(&self, key: &[u8], sync: bool) -> Result<(), Error> {
        let mut err = ptr::null_mut();
        // SAFETY: as in put.
        unsafe {
            ffi::leveldb_delete(
                self.db,
                self.write_options(sync),
                key.as_ptr().cast(),
                key.len(),
                &mut err,
            )
        };
        check(err)
    }

    /// Applies the batch atomically.
    pub fn write(&self, batch: &WriteBatch, sync: bool) -> Result<(), Error> {
        let mut err = ptr::null_mut();
        // SAFETY: LevelDB only reads the batch despite the non-const pointer in c.h.
        unsafe { ffi::leveldb_write(self.db, self.write_options(sync), batch.raw, &mut err) };
        check(err)
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, Error> {
        let mut err = ptr::null_mut();
        let mut len = 0usize;
        // SAFETY: the returned buffer is malloc'd by LevelDB and freed below after copying.
        let value = unsafe {
            ffi::leveldb_get(
                self.db,
                self.read_options,
                key.as_ptr().cast(),
                key.len(),
                &mut len,
                &mut err,
            )
        };
        check(err)?;
        if value.is_null() {
            return Ok(None);
        }
        // SAFETY: on success LevelDB returns a malloc'd buffer of `len` bytes (checked non-null).
        let copy = unsafe { std::slice::from_raw_parts(value.cast::<u8>(), len) }.to_vec();
        // SAFETY: the buffer is ours to free, once; `copy` owns the bytes now.
        unsafe { ffi::leveldb_free(value.cast()) };
        Ok(Some(copy))
    }

    /// An iterator over a consistent snapshot of the database, unpositioned until a seek.
    pub fn iter(&self) -> Iter<'_> {
        // SAFETY: the iterator borrows the Db (lifetime 'a) and is destroyed in Drop.
        let raw = unsafe { ffi::leveldb_create_iterator(self.db, self.read_options) };
        Iter {
            raw,
            _db: std::marker::PhantomData,
        }
    }

    /// A LevelDB property such as `leveldb.stats` or `leveldb.num-files-at-level0`.
    pub fn property(&self, name: &str) -> Option<String> {
        let name = CString::new(name).ok()?;
        // SAFETY: returns a malloc'd NUL-terminated string or null.
        let value = unsafe { ffi::leveldb_property_value(self.db, name.as_ptr()) };
        if value.is_null() {
            return None;
        }
        // SAFETY: non-null, NUL-terminated (see above).
        let text = unsafe { CStr::from_ptr(value) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the string is ours to free, once; `text` owns a copy.
        unsafe { ffi::leveldb_free(value.cast()) };
        Some(text)
    }

    /// Bytes of table files that the key range [start, end) takes, as LevelDB estimates them
    /// (file offsets of its index blocks: memtable contents are not counted).
    pub fn approximate_size(&self, start: &[u8], end: &[u8]) -> u64 {
        let starts = [start.as_ptr().cast::<c_char>()];
        let start_lens = [start.len()];
        let ends = [end.as_ptr().cast::<c_char>()];
        let end_lens = [end.len()];
        let mut sizes = [0u64];
        // SAFETY: one range: each array has one element, alive for the call; LevelDB writes
        // one size into `sizes`.
        unsafe {
            ffi::leveldb_approximate_sizes(
                self.db,
                1,
                starts.as_ptr(),
                start_lens.as_ptr(),
                ends.as_ptr(),
                end_lens.as_ptr(),
                sizes.as_mut_ptr(),
            );
        }
        sizes[0]
    }

    /// Compacts the key range [start, end] (None = open end).
    pub fn compact_range(&self, start: Option<&[u8]>, end: Option<&[u8]>) {
        let (sp, sl) = start.map_or((ptr::null(), 0), |s| (s.as_ptr().cast(), s.len()));
        let (ep, el) = end.map_or((ptr::null(), 0), |e| (e.as_ptr().cast(), e.len()));
        // SAFETY: null pointers mean "unbounded" per c.h.
        unsafe { ffi::leveldb_compact_range(self.db, sp, sl, ep, el) };
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        // SAFETY: each pointer was created in open and is destroyed exactly once; the DB first.
        unsafe {
            if !self.db.is_null() {
                ffi::leveldb_close(self.db);
            }
            ffi::leveldb_options_destroy(self.options);
            ffi::leveldb_cache_destroy(self.cache);
            if !self.filter.is_null() {
                ffi::leveldb_filterpolicy_destroy(self.filter);
            }
            ffi::leveldb_readoptions_destroy(self.read_options);
            ffi::leveldb_writeoptions_destroy(self.write_async);
            ffi::leveldb_writeoptions_destroy(self.write_sync);
        }
    }
}

/// A batch of updates applied atomically by [`Db::write`].
pub struct WriteBatch {
    raw: *mut ffi::leveldb_writebatch_t,
    len: usize,
}

// SAFETY: a WriteBatch is a plain owned buffer.
unsafe impl Send for WriteBatch {}

impl WriteBatch {
    pub fn new() -> WriteBatch {
        WriteBatch {
            // SAFETY: plain constructor, no preconditions.
            raw: unsafe { ffi::leveldb_writebatch_create() },
            len: 0,
        }
    }
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        // SAFETY: LevelDB copies key and value into the batch.
        unsafe {
            ffi::leveldb_writebatch_put(
                self.raw,
                key.as_ptr().cast(),
                key.len(),
                value.as_ptr().cast(),
                value.len(),
            )
        };
        self.len += 1;
    }
    pub fn delete(&mut self, key: &[u8]) {
        // SAFETY: as in put.
        unsafe { ffi::leveldb_writebatch_delete(self.raw, key.as_ptr().cast(), key.len()) };
        self.len += 1;
    }
    pub fn clear(&mut self) {
        // SAFETY: plain call on an owned batch.
        unsafe { ffi::leveldb_writebatch_clear(self.raw) };
        self.len = 0;
    }
    /// Number of puts and deletes in the batch.
    pub fn len(&self) -> usize {
        self.len
    }
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Default for WriteBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl Drop for WriteBatch {
    fn drop(&mut self) {
        // SAFETY: created in new, destroyed once.
        unsafe { ffi::leveldb_writebatch_destroy(self.raw) };
    }
}

/// An iterator over a snapshot. Keys and values borrow the iterator until the next move.
pub struct Iter<'a> {
    raw: *mut ffi::leveldb_iterator_t,
    _db: std::marker::PhantomData<&'a Db>,
}

impl Iter<'_> {
    pub fn seek_to_first(&mut self) {
        // SAFETY: raw is a live iterator.
        unsafe { ffi::leveldb_iter_seek_to_first(self.raw) }
    }
    pub fn seek(&mut self, key: &[u8]) {
        // SAFETY: LevelDB copies the target key.
        unsafe { ffi::leveldb_iter_seek(self.raw, key.as_ptr().cast(), key.len()) }
    }
    pub fn valid(&self) -> bool {
        // SAFETY: raw is a live iterator.
        unsafe { ffi::leveldb_iter_valid(self.raw) != 0 }
    }
    pub fn next(&mut self) {
        debug_assert!(self.valid());
        // SAFETY: only called on a valid iterator (LevelDB asserts this in debug builds).
        unsafe { ffi::leveldb_iter_next(self.raw) }
    }
    pub fn seek_to_last(&mut self) {
        // SAFETY: raw is a live iterator.
        unsafe { ffi::leveldb_iter_seek_to_last(self.raw) }
    }
    pub fn prev(&mut self) {
        debug_assert!(self.valid());
        // SAFETY: only called on a valid iterator, as next().
        unsafe { ffi::leveldb_iter_prev(self.raw) }
    }
    pub fn key(&self) -> &[u8] {
        assert!(self.valid(), "key() on an invalid LevelDB iterator");
        let mut len = 0;
        // SAFETY: the slice lives until the iterator moves, which needs &mut self.
        unsafe { std::slice::from_raw_parts(ffi::leveldb_iter_key(self.raw, &mut len).cast(), len) }
    }
    pub fn value(&self) -> &[u8] {
        assert!(self.valid(), "value() on an invalid LevelDB iterator");
        let mut len = 0;
        // SAFETY: as in key().
        unsafe {
            std::slice::from_raw_parts(ffi::leveldb_iter_value(self.raw, &mut len).cast(), len)
        }
    }
    /// The iterator's error status (e.g. a corrupt block met while iterating).
    pub fn status(&self) -> Result<(), Error> {
        let mut err = ptr::null_mut();
        // SAFETY: raw is a live iterator.
        unsafe { ffi::leveldb_iter_get_error(self.raw, &mut err) };
        check(err)
    }
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        // SAFETY: created in Db::iter, destroyed once, before the Db (lifetime).
        unsafe { ffi::leveldb_iter_destroy(self.raw) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn put_get_delete_iterate_and_reopen() -> Result<(), Error> {
        let dir = tempfile::tempdir().map_err(|e| Error(e.to_string()))?;
        {
            let db = Db::open(dir.path(), &Options::default())?;
            db.put(b"a", b"1", false)?;
            let mut batch = WriteBatch::new();
            batch.put(b"b", b"2");
            batch.put(b"c", b"3");
            batch.delete(b"a");
            assert_eq!(batch.len(), 3);
            db.write(&batch, true)?;
            assert_eq!(db.get(b"a")?, None);
            assert_eq!(db.get(b"b")?, Some(b"2".to_vec()));
            let mut it = db.iter();
            it.seek(b"b");
            let mut seen = Vec::new();
            while it.valid() {
                seen.push((it.key().to_vec(), it.value().to_vec()));
                it.next();
            }
            it.status()?;
            assert_eq!(
                seen,
                vec![
                    (b"b".to_vec(), b"2".to_vec()),
                    (b"c".to_vec(), b"3".to_vec())
                ]
            );
            assert!(db.property("leveldb.stats").is_some());
        }
        let db = Db::open(dir.path(), &Options::default())?;
        assert_eq!(db.get(b"c")?, Some(b"3".to_vec()));
        Ok(())
    }

    #[test]
    fn open_missing_without_create_is_an_error() {
        let dir = tempfile::tempdir().expect("tempdir");
        let options = Options {
            create_if_missing: false,
            ..Options::default()
        };
        let err = Db::open(&dir.path().join("nope"), &options)
            .err()
            .expect("must fail");
        assert!(err.0.contains("does not exist"), "{err}");
    }
}
