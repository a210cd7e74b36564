//! A body streamed from a blocking thread (a backup's tar, an export): the thread writes into
//! a `ChannelWriter`, the answer's body reads the `Chunks`. The channel is bounded, so a slow
//! client slows the writer, never grows the server's memory; a client that leaves fails the
//! writer's next write, which ends its work at once.

use std::io::Write;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::sync::mpsc;

/// A chunk of the body, or the error that cuts it (the client sees the body end early).
pub type Chunk = Result<Vec<u8>, std::io::Error>;

/// A body of at most `chunks_max` chunks in flight: its writer and its stream.
pub fn channel(chunks_max: usize) -> (ChannelWriter, Chunks) {
    let (sender, receiver) = mpsc::channel(chunks_max);
    (ChannelWriter(sender), Chunks(receiver))
}

/// The blocking side of the channel: a write waits for room, and fails once the client is gone.
#[derive(Clone)]
pub struct ChannelWriter(pub mpsc::Sender<Chunk>);

impl Write for ChannelWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .blocking_send(Ok(buf.to_vec()))
            .map_err(|_| std::io::Error::new(std::io::ErrorKind::BrokenPipe, "the client left"))?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ChannelWriter {
    /// Cuts the body with `error` (what the server logs; the client sees the body end early).
    pub fn fail(&self, error: String) {
        let _ = self.0.blocking_send(Err(std::io::Error::other(error)));
    }
}

/// The answer's body: the chunks as they come.
pub struct Chunks(pub mpsc::Receiver<Chunk>);

impl futures_core::Stream for Chunks {
    type Item = Result<Vec<u8>, std::io::Error>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.0.poll_recv(cx)
    }
}
