//! The tables in the cloud database and every statement the sink sends. The SQL is a subset
//! that PostgreSQL, TimescaleDB, Citus, CockroachDB and YugabyteDB all document (docs/SERVER.md,
//! "The cloud sink", cites each): `CREATE TABLE IF NOT EXISTS`, `INSERT ... SELECT FROM
//! unnest(arrays) ... ON CONFLICT DO NOTHING` and `... ON CONFLICT (key) DO UPDATE ... WHERE`
//! (no COPY, no temporary tables: CockroachDB keeps those behind a flag), and a conditional
//! `UPDATE`, each batch in one transaction. Only PostgreSQL 15 (Debian's) is tested here.

/// One row per reading, keyed as the engine keys it: a reading sent twice is stored once.
pub const CREATE_READINGS: &str = "CREATE TABLE IF NOT EXISTS roamkv_readings (
    device   text   NOT NULL,
    sensor   text   NOT NULL,
    ts_ns    bigint NOT NULL,
    value    bytea  NOT NULL,
    edge_id  text   NOT NULL,
    PRIMARY KEY (device, sensor, ts_ns))";

/// One row per edge: where its sink is in its log. Advanced in the same transaction as the rows
/// it covers, so the table and the cursor never disagree. `generation` counts the histories of
/// the edge's log this row has followed (a restored or replaced data directory starts a new
/// one); `snapshot_pending`: the devices present must be exported by scanning before tailing
/// from `position` (first start, or after a gap).
pub const CREATE_CURSOR: &str = "CREATE TABLE IF NOT EXISTS roamkv_sink_cursor (
    edge_id          text        PRIMARY KEY,
    generation       bigint      NOT NULL,
    position         text        NOT NULL,
    snapshot_pending boolean     NOT NULL,
    updated_at       timestamptz NOT NULL)";

/// One row per departure the edge logged: the device left that edge at that log position.
pub const CREATE_DEPARTURES: &str = "CREATE TABLE IF NOT EXISTS roamkv_departures (
    edge_id     text        NOT NULL,
    device      text        NOT NULL,
    position    text        NOT NULL,
    departed_at timestamptz NOT NULL,
    PRIMARY KEY (edge_id, position))";

pub const CREATE_ALL: [&str; 3] = [CREATE_READINGS, CREATE_CURSOR, CREATE_DEPARTURES];

/// $1 devices, $2 sensors, $3 timestamps (ns), $4 values, $5 this edge's id.
///
/// **One rule for a reading written twice, everywhere: the last write wins.** The engine keeps
/// the last value written for a (device, sensor, ts); so does the table: a row sent again with
/// the same value changes nothing (the `WHERE` skips the update, so a resent batch writes no
/// tuple), a later value replaces the earlier. A handoff's chunks are written through the
/// receiving edge's engine and reach the table the same way. A transaction never carries one key
/// twice (PostgreSQL refuses an `ON CONFLICT DO UPDATE` that touches a row twice): the sink keeps
/// the last of a batch's duplicates, in log order (`db::Rows::push`).
pub const INSERT_READINGS: &str = "INSERT INTO roamkv_readings AS r (device, sensor, ts_ns, value, edge_id)
    SELECT d, s, t, v, $5 FROM unnest($1::text[], $2::text[], $3::int8[], $4::bytea[]) AS u(d, s, t, v)
    ON CONFLICT (device, sensor, ts_ns) DO UPDATE
        SET value = EXCLUDED.value, edge_id = EXCLUDED.edge_id
        WHERE r.value IS DISTINCT FROM EXCLUDED.value";

/// $1 this edge's id, $2 devices, $3 positions (after each DEPART).
pub const INSERT_DEPARTURES: &str =
    "INSERT INTO roamkv_departures (edge_id, device, position, departed_at)
    SELECT $1, d, p, now() FROM unnest($2::text[], $3::text[]) AS u(d, p)
    ON CONFLICT DO NOTHING";

/// $1 edge, $2 generation, $3 new position, $4 snapshot still pending, $5 the position the sink
/// believes is stored. Must change exactly one row: 0 means another process (a copy of this
/// edge's data directory, or a second server) moved the cursor, and the sink stops rather than
/// write under the same identity twice.
pub const ADVANCE_CURSOR: &str = "UPDATE roamkv_sink_cursor
    SET position = $3, snapshot_pending = $4, updated_at = now()
    WHERE edge_id = $1 AND generation = $2 AND position = $5";

pub const READ_CURSOR: &str =
    "SELECT generation, position, snapshot_pending FROM roamkv_sink_cursor WHERE edge_id = $1";

/// $1 edge, $2 new generation, $3 its first position, $4 the generation it replaces (0: none).
/// Changes one row, or none if another process got there first.
pub const START_GENERATION: &str = "INSERT INTO roamkv_sink_cursor
        (edge_id, generation, position, snapshot_pending, updated_at)
    VALUES ($1, $2, $3, true, now())
    ON CONFLICT (edge_id) DO UPDATE
        SET generation = EXCLUDED.generation, position = EXCLUDED.position,
            snapshot_pending = true, updated_at = now()
        WHERE roamkv_sink_cursor.generation = $4";
