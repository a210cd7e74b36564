//! A block: the readings of one (device, sensor) run in one place of the lower tier, encoded as a
//! time series (docs/FORMAT.md, "Reading blocks"). The key holds the first reading's timestamp;
//! the block holds the count, the timestamps after the first as delta-of-delta varints, and the
//! values as one of two columns, whichever is smaller once compressed:
//!
//! - **raw**: each value's length, then the values' bytes;
//! - **shaped text**: each value split into its *shape* (the text with every ASCII digit run
//!   replaced by `#` repeated to the run's width) and its digit runs as integers. Shapes go
//!   once into a per-block dictionary; each digit run is stored as its difference to the same
//!   run of the previous value of the same shape (a sensor's "2.153000e+01" then
//!   "2.154000e+01" costs a shape index and three small numbers). The text comes back exactly:
//!   the shape gives every non-digit byte and each run's width (leading zeros included).
//!
//! The body (timestamps and values) is compressed with zstd when that makes it smaller. Every
//! count and length is bounded before anything is allocated for it: a block from disk is
//! untrusted bytes (`fuzz/fuzz_targets/reading_block.rs`).

use std::cell::RefCell;

use integer_encoding::VarInt;

/// The first byte of every block: its format.
pub const BLOCK_FORMAT: u8 = 1;
const COMPRESSION_NONE: u8 = 0;
const COMPRESSION_ZSTD: u8 = 1;
const VALUES_RAW: u8 = 0;
const VALUES_SHAPED: u8 = 1;
/// zstd's level: 3 (its default) compresses sensor text about as well as 19 here, at a small
/// fraction of the CPU; blocks are written by maintenance, off the ingest path.
const ZSTD_LEVEL: i32 = 3;

/// Readings a block holds at most: a point read decodes one whole block.
pub const BLOCK_READINGS_MAX: usize = 1024;
/// Bytes of values a block gathers before it is cut (a block still holds at least one reading,
/// however large its value: values are at most `limits::VALUE_BYTES_MAX`).
pub const BLOCK_VALUE_BYTES_TARGET: usize = 128 * 1024;
/// The most a decoded body may take: a block of `BLOCK_READINGS_MAX` readings whose values
/// total the target plus one value of the largest size, with room for the timestamps and
/// lengths. A block claiming more is damaged.
pub const BLOCK_BODY_BYTES_MAX: usize =
    BLOCK_VALUE_BYTES_TARGET + crate::model::limits::VALUE_BYTES_MAX + BLOCK_READINGS_MAX * 24;
/// Digits a digit run may have to be stored as a number (u64 holds any 19 digits).
const RUN_DIGITS_MAX: usize = 19;
/// Digit runs a value may have to be shaped (more: the block's values go raw).
const RUNS_PER_VALUE_MAX: usize = 16;

/// A block that does not decode: what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BadBlock(pub String);

fn bad(what: impl Into<String>) -> BadBlock {
    BadBlock(what.into())
}

/// Encodes readings of one run, ascending by timestamp, at least one.
pub fn encode(readings: &[(i64, &[u8])]) -> Vec<u8> {
    assert!(!readings.is_empty(), "a block holds at least one reading");
    let mut body = Vec::new();
    encode_timestamps(readings, &mut body);
    let ts_bytes = body.len();
    let mut raw = body.clone();
    encode_raw(readings, &mut raw);
    let raw = compressed(raw);
    let best = match shape_values(readings) {
        Some(shaped) => {
            body.truncate(ts_bytes);
            encode_shaped(&shaped, &mut body);
            let shaped = compressed(body);
            if shaped.2.len() < raw.2.len() {
                shaped
            } else {
                raw
            }
        }
        None => raw,
    };
    let (compression, body_bytes, stored) = best;
    let mut out = Vec::with_capacity(stored.len() + 12);
    out.push(BLOCK_FORMAT);
    out.push(compression);
    push_var(&mut out, readings.len() as u64);
    push_var(&mut out, body_bytes as u64);
    out.extend_from_slice(&stored);
    out
}

thread_local! {
    /// Each thread that writes blocks (maintenance's moves and consolidations, a delete that
    /// cuts a block) keeps one zstd context and reuses it: `zstd::bulk::compress` made one per
    /// block, and making it (its tables allocated and zeroed) took ~6 % of the engine's CPU
    /// under `bench steady` (docs/BENCHMARKS.md, "Footprint"), more than the compression. The
    /// cost is the context's memory, under 1 MiB at level 3 for a block's size, per such thread.
    static COMPRESSOR: RefCell<Option<zstd::bulk::Compressor<'static>>> =
        const { RefCell::new(None) };
}

/// (compression, uncompressed length, stored bytes): zstd only where it is smaller.
fn compressed(body: Vec<u8>) -> (u8, usize, Vec<u8>) {
    let len = body.len();
    let z = COMPRESSOR.with(|compressor| {
        let mut compressor = compressor.borrow_mut();
        if compressor.is_none() {
            *compressor = zstd::bulk::Compressor::new(ZSTD_LEVEL).ok();
        }
        compressor.as_mut().map(|c| c.compress(&body))
    });
    match z {
        Some(Ok(z)) if z.len() < len => (COMPRESSION_ZSTD, len, z),
        _ => (COMPRESSION_NONE, len, body),
    }
}

/// Decodes a block whose key gave `first_ts`: (ts, value) ascending.
pub fn decode(first_ts: i64, block: &[u8]) -> Result<Vec<(i64, Vec<u8>)>, BadBlock> {
    let mut r = Reader { b: block, at: 0 };
    let format = r.byte()?;
    if format != BLOCK_FORMAT {
        return Err(bad(format!(
            "block format {format}, this build reads {BLOCK_FORMAT}"
        )));
    }
    let compression = r.byte()?;
    let n = r.var()? as usize;
    if n == 0 || n > BLOCK_READINGS_MAX {
        return Err(bad(format!(
            "{n} readings (a block holds 1 to {BLOCK_READINGS_MAX})"
        )));
    }
    let body_bytes = r.var()? as usize;
    if body_bytes > BLOCK_BODY_BYTES_MAX {
        return Err(bad(format!(
            "a body of {body_bytes} bytes (at most {BLOCK_BODY_BYTES_MAX})"
        )));
    }
    let stored = &block[r.at..];
    let body = match compression {
        COMPRESSION_NONE => stored.to_vec(),
        COMPRESSION_ZSTD => {
            zstd::bulk::decompress(stored, body_bytes).map_err(|e| bad(format!("zstd: {e}")))?
        }
        other => return Err(bad(format!("unknown compression {other}"))),
    };
    if body.len() != body_bytes {
        return Err(bad(format!(
            "a body of {} bytes where the header says {body_bytes}",
            body.len()
        )));
    }
    let mut r = Reader { b: &body, at: 0 };
    let stamps = decode_timestamps(first_ts, n, &mut r)?;
    let values = match r.byte()? {
        VALUES_RAW => decode_raw(n, &mut r)?,
        VALUES_SHAPED => decode_shaped(n, &mut r)?,
        other => return Err(bad(format!("unknown value column {other}"))),
    };
    if r.at != body.len() {
        return Err(bad(format!(
            "{} bytes after the last value",
            body.len() - r.at
        )));
    }
    Ok(stamps.into_iter().zip(values).collect())
}

fn push_var(out: &mut Vec<u8>, v: u64) {
    let mut buf = [0u8; 10];
    let n = v.encode_var(&mut buf);
    out.extend_from_slice(&buf[..n]);
}

fn push_signed(out: &mut Vec<u8>, v: i64) {
    let mut buf = [0u8; 10];
    let n = v.encode_var(&mut buf); // zigzag: small magnitudes of either sign stay short
    out.extend_from_slice(&buf[..n]);
}

/// Timestamps after the first: each delta minus the previous delta (0 at a steady rate).
fn encode_timestamps(readings: &[(i64, &[u8])], out: &mut Vec<u8>) {
    let mut prev_delta: i64 = 0;
    for pair in readings.windows(2) {
        let delta = pair[1].0.wrapping_sub(pair[0].0);
        assert!(delta > 0, "a block's readings ascend strictly");
        push_signed(out, delta.wrapping_sub(prev_delta));
        prev_delta = delta;
    }
}

fn decode_timestamps(first_ts: i64, n: usize, r: &mut Reader) -> Result<Vec<i64>, BadBlock> {
    let mut stamps = Vec::with_capacity(n);
    stamps.push(first_ts);
    let (mut ts, mut delta) = (first_ts, 0i64);
    for _ in 1..n {
        delta = delta
            .checked_add(r.signed()?)
            .ok_or_else(|| bad("a timestamp delta overflows"))?;
        ts = match ts.checked_add(delta) {
            Some(next) if delta > 0 => next,
            _ => return Err(bad("timestamps that do not ascend")),
        };
        stamps.push(ts);
    }
    Ok(stamps)
}

fn encode_raw(readings: &[(i64, &[u8])], out: &mut Vec<u8>) {
    out.push(VALUES_RAW);
    for (_, v) in readings {
        push_var(out, v.len() as u64);
    }
    for (_, v) in readings {
        out.extend_from_slice(v);
    }
}

fn decode_raw(n: usize, r: &mut Reader) -> Result<Vec<Vec<u8>>, BadBlock> {
    let mut lens = Vec::with_capacity(n);
    for _ in 0..n {
        lens.push(r.var()? as usize);
    }
    lens.into_iter()
        .map(|len| Ok(r.take(len)?.to_vec()))
        .collect()
}

/// Values split into shapes and digit runs.
struct Shaped {
    /// Each distinct shape once, in the order first seen.
    shapes: Vec<Vec<u8>>,
    /// Per reading: its shape's index and its runs' numbers.
    values: Vec<(usize, Vec<u64>)>,
}

/// The values as shapes and digit runs, or None when some value is not text of that kind (not
/// UTF-8, a run too long to be a u64, too many runs) or the shapes are nearly as many as the
/// values (nothing to gain: UUIDs, free text).
fn shape_values(readings: &[(i64, &[u8])]) -> Option<Shaped> {
    let mut index: std::collections::HashMap<Vec<u8>, usize> = Default::default();
    let mut shaped = Shaped {
        shapes: Vec::new(),
        values: Vec::with_capacity(readings.len()),
    };
    for (_, value) in readings {
        std::str::from_utf8(value).ok()?;
        let (shape, runs) = split_digits(value)?;
        let next = shaped.shapes.len();
        let at = *index.entry(shape.clone()).or_insert(next);
        if at == next {
            shaped.shapes.push(shape);
        }
        shaped.values.push((at, runs));
    }
    (shaped.shapes.len() <= readings.len() / 2 + 1).then_some(shaped)
}

/// The value with each digit run replaced by as many `#`, and the runs as numbers. A `#` in the
/// value itself cannot be told from a run's: such values are not shaped.
fn split_digits(value: &[u8]) -> Option<(Vec<u8>, Vec<u64>)> {
    let mut shape = Vec::with_capacity(value.len());
    let mut runs = Vec::new();
    let mut i = 0;
    while i < value.len() {
        let c = value[i];
        if c == b'#' {
            return None;
        }
        if !c.is_ascii_digit() {
            shape.push(c);
            i += 1;
            continue;
        }
        let start = i;
        while i < value.len() && value[i].is_ascii_digit() {
            i += 1;
        }
        if i - start > RUN_DIGITS_MAX || runs.len() == RUNS_PER_VALUE_MAX {
            return None;
        }
        let text = std::str::from_utf8(&value[start..i]).ok()?;
        runs.push(text.parse().ok()?);
        shape.extend(std::iter::repeat_n(b'#', i - start));
    }
    Some((shape, runs))
}

fn encode_shaped(shaped: &Shaped, out: &mut Vec<u8>) {
    out.push(VALUES_SHAPED);
    push_var(out, shaped.shapes.len() as u64);
    for shape in &shaped.shapes {
        push_var(out, shape.len() as u64);
        out.extend_from_slice(shape);
    }
    for (at, _) in &shaped.values {
        push_var(out, *at as u64);
    }
    // Each run against the same run of the previous value of the same shape.
    let mut previous: Vec<Vec<u64>> = vec![Vec::new(); shaped.shapes.len()];
    for (at, runs) in &shaped.values {
        let prev = &mut previous[*at];
        prev.resize(runs.len(), 0);
        for (run, last) in runs.iter().zip(prev.iter_mut()) {
            push_signed(out, run.wrapping_sub(*last) as i64);
            *last = *run;
        }
    }
}

fn decode_shaped(n: usize, r: &mut Reader) -> Result<Vec<Vec<u8>>, BadBlock> {
    let shape_count = r.var()? as usize;
    if shape_count == 0 || shape_count > n {
        return Err(bad(format!("{shape_count} shapes for {n} values")));
    }
    let mut shapes = Vec::with_capacity(shape_count);
    for _ in 0..shape_count {
        let len = r.var()? as usize;
        let shape = r.take(len)?;
        shapes.push(widths(shape)?);
    }
    let mut at = Vec::with_capacity(n);
    for _ in 0..n {
        let i = r.var()? as usize;
        if i >= shape_count {
            return Err(bad(format!("shape {i} of {shape_count}")));
        }
        at.push(i);
    }
    let mut previous: Vec<Vec<u64>> = shapes.iter().map(|(_, w)| vec![0; w.len()]).collect();
    let mut values = Vec::with_capacity(n);
    for i in at {
        let (shape, runs) = &shapes[i];
        let prev = &mut previous[i];
        let mut numbers = Vec::with_capacity(runs.len());
        for last in prev.iter_mut() {
            *last = last.wrapping_add(r.signed()? as u64);
            numbers.push(*last);
        }
        values.push(fill(shape, runs, &numbers)?);
    }
    Ok(values)
}

/// A shape's bytes and the width of each of its runs.
fn widths(shape: &[u8]) -> Result<(Vec<u8>, Vec<usize>), BadBlock> {
    let mut runs = Vec::new();
    let mut i = 0;
    while i < shape.len() {
        if shape[i] == b'#' {
            let start = i;
            while i < shape.len() && shape[i] == b'#' {
                i += 1;
            }
            if i - start > RUN_DIGITS_MAX {
                return Err(bad(format!("a digit run {} wide", i - start)));
            }
            runs.push(i - start);
        } else {
            i += 1;
        }
    }
    Ok((shape.to_vec(), runs))
}

/// The value: the shape with each run's `#`s replaced by its number, zero-padded to the width.
fn fill(shape: &[u8], widths: &[usize], numbers: &[u64]) -> Result<Vec<u8>, BadBlock> {
    let mut out = Vec::with_capacity(shape.len());
    let mut runs = widths.iter().zip(numbers);
    let mut i = 0;
    while i < shape.len() {
        if shape[i] != b'#' {
            out.push(shape[i]);
            i += 1;
            continue;
        }
        let (&width, number) = runs.next().ok_or_else(|| bad("a run without a number"))?;
        let digits = format!("{number:0width$}");
        if digits.len() != width {
            return Err(bad(format!("{number} does not fit a run {width} wide")));
        }
        out.extend_from_slice(digits.as_bytes());
        i += width;
    }
    Ok(out)
}

/// Bytes read in order, each read bounded by what is there.
struct Reader<'a> {
    b: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn byte(&mut self) -> Result<u8, BadBlock> {
        let b = *self.b.get(self.at).ok_or_else(|| bad("cut short"))?;
        self.at += 1;
        Ok(b)
    }
    fn var(&mut self) -> Result<u64, BadBlock> {
        let (v, n) = u64::decode_var(&self.b[self.at..]).ok_or_else(|| bad("a bad varint"))?;
        self.at += n;
        Ok(v)
    }
    fn signed(&mut self) -> Result<i64, BadBlock> {
        let (v, n) = i64::decode_var(&self.b[self.at..]).ok_or_else(|| bad("a bad varint"))?;
        self.at += n;
        Ok(v)
    }
    fn take(&mut self, len: usize) -> Result<&[u8], BadBlock> {
        let end = self
            .at
            .checked_add(len)
            .filter(|end| *end <= self.b.len())
            .ok_or_else(|| bad(format!("{len} bytes past the end")))?;
        let out = &self.b[self.at..end];
        self.at = end;
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(readings: &[(i64, Vec<u8>)]) -> usize {
        let borrowed: Vec<(i64, &[u8])> = readings.iter().map(|(t, v)| (*t, &v[..])).collect();
        let block = encode(&borrowed);
        let back = decode(readings[0].0, &block).expect("decodes");
        assert_eq!(back, readings, "round trip");
        block.len()
    }

    #[test]
    fn values_come_back_as_the_very_bytes_sent() {
        let texts = [
            "2.150000e+01",
            "2.150100e+01",
            "21.5",
            "007",
            "-0.000",
            "1e-7",
            "true",
            "false",
            "idle",
            "99999999999999999999", // 20 digits: not a u64 run
            "",
            "a#b",
            "3f2a9c1e-5b7d-4e21-9a0b-c1d2e3f4a5b6",
        ];
        let readings: Vec<(i64, Vec<u8>)> = texts
            .iter()
            .enumerate()
            .map(|(i, t)| (i as i64 * 1_000 - 5_000, t.as_bytes().to_vec()))
            .collect();
        round_trip(&readings);
        round_trip(&[(i64::MIN, vec![0xff, 0, 1])]);
        round_trip(&[(i64::MAX - 1, b"x".to_vec()), (i64::MAX, vec![0x80])]);
    }

    #[test]
    fn a_steady_sensor_costs_a_few_bytes_a_reading() {
        let mut v = 21.53f64;
        let readings: Vec<(i64, Vec<u8>)> = (0..1000)
            .map(|i| {
                v += if i % 3 == 0 { 0.01 } else { -0.005 };
                (
                    1_700_000_000_000_000_000 + i * 1_000_000_000,
                    format!("{v:.6e}").into_bytes(),
                )
            })
            .collect();
        let bytes = round_trip(&readings);
        assert!(bytes < 4 * 1000, "{bytes} bytes for 1000 readings");
        let counter: Vec<(i64, Vec<u8>)> = (0..1000)
            .map(|i| (i * 1_000_000_000, (i * 7).to_string().into_bytes()))
            .collect();
        let bytes = round_trip(&counter);
        assert!(bytes < 1000, "{bytes} bytes for a counter's 1000 readings");
    }

    #[test]
    fn random_readings_round_trip() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        for _ in 0..300 {
            let n = rng.random_range(1..200);
            let mut ts: i64 = rng.random();
            ts /= 2;
            let readings: Vec<(i64, Vec<u8>)> = (0..n)
                .map(|_| {
                    ts += rng.random_range(1..1_000_000);
                    let len = rng.random_range(0..20);
                    let alphabet = b"0123456789.e+-#ab";
                    let value = (0..len)
                        .map(|_| alphabet[rng.random_range(0..alphabet.len())])
                        .collect();
                    (ts, value)
                })
                .collect();
            round_trip(&readings);
        }
    }

    #[test]
    fn damaged_blocks_are_errors() {
        let block = encode(&[(5, b"1.5".as_slice()), (9, b"1.6".as_slice())]);
        for cut in 0..block.len() {
            assert!(decode(5, &block[..cut]).is_err(), "cut at {cut}");
        }
        let mut wrong = block.clone();
        wrong[0] = 9;
        assert!(
            decode(5, &wrong)
                .expect_err("format 9 is refused")
                .0
                .contains("format 9")
        );
    }
}
