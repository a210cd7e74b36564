//! The delay relay of `roamkv bench handoff` (this kernel has no netem): TCP listeners in the
//! hub's namespace, one per route, each forwarding to its target and holding every byte a fixed
//! one-way delay in each direction before passing it on. What A and B say to each other, and what
//! the edges' sinks say to PostgreSQL, goes through it. It terminates TCP, so the delay it adds is
//! seen by the applications, not by the kernels' congestion control; the links' rate and loss are
//! the kernel's (net.rs). Also the link probe: the payload rate one TCP stream gets through the
//! same path, which the bulk handoff is reported against.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::error::{BenchError, Result};

/// Bytes read at once from a connection (a unit of the delay line).
const READ_BYTES: usize = 64 * 1024;
/// Units a direction may hold in its delay line before it stops reading (then TCP's flow control
/// pushes back on the sender): 4 MiB, above the bandwidth-delay product of 1 Gbit/s x 20 ms.
const LINE_UNITS_MAX: usize = 64;

/// The relay's listeners; stopped (and their connections closed) on drop.
pub struct Relay {
    stop: Arc<AtomicBool>,
    listeners: Vec<(SocketAddr, JoinHandle<()>)>,
}

impl Relay {
    /// A listener in namespace `hub` for each `(listen, target)` route, each byte held
    /// `one_way_delay` in each direction.
    pub fn start(
        hub: &str,
        routes: &[(SocketAddr, SocketAddr)],
        one_way_delay: Duration,
    ) -> Result<Relay> {
        let stop = Arc::new(AtomicBool::new(false));
        let mut listeners = Vec::new();
        let ns_path = PathBuf::from(roamkv_testbed::netns::NETNS_DIR).join(hub);
        for &(listen, target) in routes {
            let (ready_tx, ready_rx) = mpsc::channel();
            let (stop, ns_path) = (Arc::clone(&stop), ns_path.clone());
            let handle = std::thread::Builder::new()
                .name("relay".into())
                .spawn(move || {
                    let listener = super::net::setns(&ns_path).and_then(|()| {
                        TcpListener::bind(listen)
                            .map_err(|e| BenchError::os(format!("relay: listening on {listen}"), e))
                    });
                    let listener = match listener {
                        Ok(l) => {
                            let _ = ready_tx.send(Ok(()));
                            l
                        }
                        Err(e) => {
                            let _ = ready_tx.send(Err(e));
                            return;
                        }
                    };
                    for client in listener.incoming() {
                        if stop.load(Ordering::Relaxed) {
                            return;
                        }
                        if let Ok(client) = client {
                            let stop = Arc::clone(&stop);
                            // Threads spawned here start in the hub's namespace too.
                            std::thread::spawn(move || {
                                connect(client, target, one_way_delay, &stop)
                            });
                        }
                    }
                })
                .map_err(|e| BenchError::os("starting the relay", e))?;
            ready_rx
                .recv()
                .map_err(|_| BenchError::Run("the relay's listener ended".into()))??;
            listeners.push((listen, handle));
        }
        Ok(Relay { stop, listeners })
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        for (listen, handle) in self.listeners.drain(..) {
            // Wakes the accept (from the hub's namespace: a thread of its own).
            let hub_thread = std::thread::spawn(move || {
                let _ = TcpStream::connect_timeout(&listen, Duration::from_millis(200));
            });
            let _ = hub_thread.join();
            if handle.is_finished() {
                let _ = handle.join();
            }
        }
    }
}

/// One relayed connection: a delay line each way until either side closes.
fn connect(client: TcpStream, target: SocketAddr, delay: Duration, stop: &Arc<AtomicBool>) {
    let Ok(server) = TcpStream::connect_timeout(&target, Duration::from_secs(3)) else {
        let _ = client.shutdown(Shutdown::Both);
        return;
    };
    let _ = (client.set_nodelay(true), server.set_nodelay(true));
    let (Ok(c2), Ok(s2)) = (client.try_clone(), server.try_clone()) else {
        return;
    };
    let up = {
        let stop = Arc::clone(stop);
        std::thread::spawn(move || delay_line(client, server, delay, &stop))
    };
    delay_line(s2, c2, delay, stop);
    let _ = up.join();
}

/// Reads `from`, writes to `to` each unit `delay` after it was read; on end or error, shuts both.
fn delay_line(mut from: TcpStream, to: TcpStream, delay: Duration, stop: &AtomicBool) {
    let (tx, rx) = mpsc::sync_channel::<(Instant, Vec<u8>)>(LINE_UNITS_MAX);
    let writer = {
        let mut to = to.try_clone().ok();
        std::thread::spawn(move || {
            for (due, unit) in rx {
                std::thread::sleep(due.saturating_duration_since(Instant::now()));
                let Some(out) = to.as_mut() else { return };
                if out.write_all(&unit).is_err() {
                    return;
                }
            }
        })
    };
    let _ = from.set_read_timeout(Some(Duration::from_millis(500)));
    let mut buf = vec![0u8; READ_BYTES];
    loop {
        match from.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if tx
                    .send((Instant::now() + delay, buf[..n].to_vec()))
                    .is_err()
                {
                    break;
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) && !stop.load(Ordering::Relaxed) => {}
            Err(_) => break,
        }
    }
    drop(tx);
    let _ = writer.join();
    // What was in the line is delivered; then the other side sees the end.
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// The payload rate (bytes/s) one TCP stream gets from namespace `from_ns` to a listener in
/// `to_ns` at `to_listen`, sent to `via` (the relay's route to it), over `seconds`.
pub fn probe_link(
    from_ns: &str,
    to_ns: &str,
    to_listen: SocketAddr,
    via: SocketAddr,
    seconds: f64,
) -> Result<f64> {
    let dir = PathBuf::from(roamkv_testbed::netns::NETNS_DIR);
    let (ready_tx, ready_rx) = mpsc::channel();
    let to_path = dir.join(to_ns);
    let receiver = std::thread::spawn(move || -> Result<u64> {
        super::net::setns(&to_path)?;
        let listener = TcpListener::bind(to_listen)
            .map_err(|e| BenchError::os(format!("probe: listening on {to_listen}"), e))?;
        let _ = ready_tx.send(());
        let (mut conn, _) = listener
            .accept()
            .map_err(|e| BenchError::os("probe: accepting", e))?;
        let mut buf = vec![0u8; READ_BYTES];
        let mut total = 0u64;
        loop {
            match conn.read(&mut buf) {
                Ok(0) => return Ok(total),
                Ok(n) => total += n as u64,
                Err(e) => return Err(BenchError::os("probe: reading", e)),
            }
        }
    });
    ready_rx
        .recv()
        .map_err(|_| BenchError::Run("the probe's receiver ended before it listened".into()))?;
    let from_path = dir.join(from_ns);
    let sender = std::thread::spawn(move || -> Result<(u64, f64)> {
        super::net::setns(&from_path)?;
        let mut conn = TcpStream::connect(via)
            .map_err(|e| BenchError::os(format!("probe: connecting to {via}"), e))?;
        let unit = vec![0x5au8; READ_BYTES];
        let started = Instant::now();
        let mut sent = 0u64;
        while started.elapsed().as_secs_f64() < seconds {
            conn.write_all(&unit)
                .map_err(|e| BenchError::os("probe: sending", e))?;
            sent += unit.len() as u64;
        }
        let _ = conn.shutdown(Shutdown::Write);
        Ok((sent, started.elapsed().as_secs_f64()))
    });
    let (_, sent_seconds) = sender
        .join()
        .map_err(|_| BenchError::Run("the probe's sender panicked".into()))??;
    let started = Instant::now();
    let received = receiver
        .join()
        .map_err(|_| BenchError::Run("the probe's receiver panicked".into()))??;
    // The receiver's count over the sender's time plus the drain: what arrived, end to end.
    Ok(received as f64 / (sent_seconds + started.elapsed().as_secs_f64()))
}
