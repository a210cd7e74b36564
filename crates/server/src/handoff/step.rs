//! What every step of the sender's task shares: the record saved (durably, then shown) before the
//! next step, and the receiver's answer read as the status a step wants or an error a user can
//! act on.

use std::sync::Arc;

use axum::http::StatusCode;

use super::book::store::{OutRecord, OutState};
use super::peer::{message_of, token_refused, unanswered};
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

/// What the receiver at `to` answered, as an error when it is not `want`: a request that got no
/// answer, or a refused peer token, said as what is wrong and what to do (peer.rs).
pub async fn expect_status(
    answer: Result<reqwest::Response, reqwest::Error>,
    want: StatusCode,
    what: &str,
    to: &str,
) -> Result<reqwest::Response, String> {
    let answer = answer.map_err(|e| format!("{what} at {to}: {}", unanswered(to, e)))?;
    if answer.status().as_u16() == want.as_u16() {
        return Ok(answer);
    }
    let status = answer.status();
    let body = answer.text().await.unwrap_or_default();
    let message = message_of(&body);
    Err(match token_refused(to, status.as_u16(), &message) {
        Some(sentence) => format!("{what} at {to}: {sentence} ({status}: {message})"),
        None => format!("{what}: the receiver answered {status}: {body}"),
    })
}
