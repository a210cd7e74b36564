//! What every step of the sender's task shares: the record saved (durably, then shown) before the
//! next step, and the receiver's answer read as the status a step wants or an error.

use std::sync::Arc;

use axum::http::StatusCode;

use super::book::store::{OutRecord, OutState};
use super::state::Shared;

/// Saves the record (the step is done only once this returns) and puts it in the book, unless
/// the handoff was called off meanwhile.
pub async fn advance(state: &Shared, record: OutRecord) -> Result<(), String> {
    let s = Arc::clone(state);
    tokio::task::spawn_blocking(move || {
        let book = s.handoffs.book.lock();
        if book
            .outs
            .get(&record.id)
            .is_some_and(|r| r.state == OutState::Aborted)
        {
            return Ok(());
        }
        drop(book);
        s.handoffs.store.save_out(&record)?;
        s.handoffs
            .book
            .lock()
            .outs
            .insert(record.id.clone(), record);
        Ok(())
    })
    .await
    .map_err(|e| format!("saving a handoff record: {e}"))?
}

/// What the receiver answered, as an error when it is not `want`.
pub async fn expect_status(
    answer: Result<reqwest::Response, reqwest::Error>,
    want: StatusCode,
    what: &str,
) -> Result<reqwest::Response, String> {
    let answer = answer.map_err(|e| format!("{what}: the receiver did not answer: {e}"))?;
    if answer.status().as_u16() == want.as_u16() {
        return Ok(answer);
    }
    let status = answer.status();
    let body = answer.text().await.unwrap_or_default();
    Err(format!("{what}: the receiver answered {status}: {body}"))
}
