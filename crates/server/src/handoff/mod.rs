//! Handoff: when a device moves on, its data follows it to the next edge (paper 002, Fig. 1:
//! "the device data managed by the previous edge server can be transferred … to the destination
//! edge server and managed there; then the previous edge server deletes the data"), exactly once,
//! through kill -9 of either side. docs/SERVER.md, "Handoff", has the protocol and each fault.
//!
//! Edge A hands device d to edge B:
//! 1. **fence** d at A (writes of it refused with 409 and B's address, none in flight), record the
//!    handoff durably with the device's next *epoch*;
//! 2. **begin** at B (B records it; refuses a stale epoch, a handoff to itself, or a device it is
//!    handing on itself);
//! 3. **send** d's readings from both tiers, in (sensor, ts) order, as native binary batches
//!    (`PUT /handoffs/{id}/chunks/{n}`), each acknowledged by B only once durable; A keeps how
//!    far it got;
//! 4. **commit** at B (recorded durably; from now on B owns d);
//! 5. **depart** d at A: one DEPART record, nothing rewritten (a departed device costs nothing).
//!
//! Every step is idempotent (a chunk sent twice writes the same keys with the same values; a
//! commit twice is one) and A's task resumes by itself from its record after a restart of A, and
//! retries while B is away. Modules: `send` (A's task and routes), `receive` (B's routes); what
//! this edge knows of its handoffs and the files that keep it are `book/` (`store`); how it
//! reaches another edge (`http://` or `https://`, the peer token, errors a user can act on) is
//! `peer`; what the part holds and is given is `state` (`HandoffState`): the server's state holds
//! it, and the part never names the server's state.

pub mod book;
mod chunks;
pub mod peer;
pub mod receive;
pub mod send;
pub mod state;
mod step;

use axum::Router;
use axum::routing::{get, post, put};

use state::Shared;

/// The handoff routes (under /api/roamkv/v1).
pub fn routes() -> Router<Shared> {
    Router::new()
        .route("/edge", get(send::edge))
        .route("/devices/{device}/handoff", post(send::start))
        .route("/devices/{device}/arrived", post(receive::arrived))
        .route("/handoffs", get(send::list))
        .route(
            "/handoffs/{id}",
            get(send::status).delete(send::abort_or_cancel),
        )
        .route("/handoffs/{id}/begin", post(receive::begin))
        .route("/handoffs/{id}/chunks/{n}", put(receive::chunk))
        .route("/handoffs/{id}/commit", post(receive::commit))
}
