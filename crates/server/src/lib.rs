//! `roamkv serve`: the edge server around the engine. It speaks EdgeX core-data v3 over HTTP
//! and takes events from EdgeX's MQTT bus, adds a native API for what EdgeX lacks (paged scans,
//! latest readings, device listing, explicit departure, binary batches, per-device retention),
//! and is run like a service: Prometheus
//! metrics, health and readiness, a status page, bearer auth, request limits, graceful shutdown.
//! docs/SERVER.md has the API, the mapping of events onto the engine's keys, and a curl session.
//!
//! It is a thin layer (docs/PROPERTIES.md, "The server"): each query is engine calls, no second copy of
//! the data and no second journal.
#![deny(clippy::unwrap_used)]

mod clock;
pub mod departures;
pub mod files;
pub mod handoff;
mod http;
mod ingest;
pub mod observability;
pub mod retention;
mod routes;
pub mod settings;
mod state;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use roamkv_engine::{Engine, Options};
use tokio::net::TcpListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinHandle;

use clock::now_ms;
use departures::{cloud, departing, fence};
use files::edge;
use ingest::republish;
use observability::status::Sample;
use observability::{metrics, status};
pub use routes::mqtt;
pub use settings::{Config, ServeArgs};
use state::{AppState, Shared};

/// How often the status page's history is sampled.
const SAMPLE_INTERVAL: Duration = Duration::from_secs(1);

/// A server that is up: its address, and the handle to stop it.
pub struct Running {
    pub addr: SocketAddr,
    /// "https" with TLS, "http" without.
    pub scheme: &'static str,
    stop: watch::Sender<bool>,
    task: JoinHandle<Result<(), String>>,
}

impl Running {
    /// Begins a graceful shutdown: stop accepting, finish in-flight requests (up to the drain
    /// timeout), stop MQTT, close the engine. `wait` tells when it is done.
    pub fn shutdown(&self) {
        let _ = self.stop.send(true);
    }

    pub async fn wait(self) -> Result<(), String> {
        self.task
            .await
            .map_err(|e| format!("server task failed: {e}"))?
    }
}

/// Opens the engine, binds the listener, starts MQTT ingest and the status sampler. The
/// process's log is its caller's (`run` sets it up).
pub async fn start(config: Config) -> Result<Running, String> {
    start_serving(config, None).await
}

/// `start`, with what puts a new log filter in force on SIGHUP (`run`'s log).
// Long because: the start is one ordered sequence (TLS, the engine, the server's own files, the
// sink, the listener, the state, the fences, SIGHUP, MQTT), each step's failure ending it before
// the next; split, the order that matters would be spread over functions.
async fn start_serving(
    mut config: Config,
    set_log_filter: Option<settings::reload::SetLogFilter>,
) -> Result<Running, String> {
    // TLS first: a certificate that cannot be used stops the start before anything is opened.
    let tls = match &config.tls {
        Some(files) => Some(Arc::new(settings::tls::Tls::load(files.clone())?)),
        None => None,
    };
    let engine = open_engine(&config).await?;
    // After the engine: its LOCK keeps a second server away from the server's own files.
    let retention = retention::RetentionStore::open(&config.data)?;
    if !config.retention_default_given {
        config.retention_default_ms = retention::settle_default(&config.data, &engine)?;
    }
    let edge_id = edge::load_or_make(&config.data)?;
    let departing = departing::Departing::open(&config.data)?;
    let fences = Arc::new(departing_fences(&departing)?);
    let handoffs = handoff::book::Handoffs::open(&config.data)?;
    let engine = Arc::new(engine);
    let commits_flush = config.durability == roamkv_engine::Durability::Sync;
    let ingest = ingest::writers::Ingest::start(
        Arc::clone(&engine),
        Arc::clone(&fences),
        commits_flush,
        config.commit_delay,
    )?;
    let (stop, stop_rx) = watch::channel(false);
    let sink = match &config.sink {
        Some(settings) => Some(cloud::start(&engine, settings, &edge_id, stop_rx.clone()).await?),
        None => None,
    };
    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| format!("listening on {}: {e}", config.listen))?;
    let addr = listener
        .local_addr()
        .map_err(|e| format!("listening on {}: {e}", config.listen))?;
    let scheme = if tls.is_some() { "https" } else { "http" };
    let advertise_url = config
        .advertise_url
        .clone()
        .unwrap_or_else(|| format!("{scheme}://{addr}"));
    let metrics = metrics::Metrics::new();
    let republisher = republish::Republisher::new(
        config
            .mqtt
            .as_ref()
            .and_then(|m| m.republish_prefix.clone()),
        metrics.republished.clone(),
    );
    let history = Arc::new(parking_lot::Mutex::new(status::History::default()));
    let handoff = Arc::new(handoff::state::HandoffState {
        engine: Arc::clone(&engine),
        handoffs,
        fences: Arc::clone(&fences),
        edge_id: edge_id.clone(),
        advertise_url,
        config: handoff::state::HandoffConfig::of(&config),
        history: Arc::clone(&history),
        peer: Arc::new(handoff::peer::PeerLink::new(&config.peer)?),
    });
    let peer = Arc::clone(&handoff.peer);
    let live = Arc::new(settings::reload::Live::new(
        &config,
        tls.clone(),
        settings::reload::Hooks {
            set_log_filter,
            set_peer: Some(Box::new(move |settings| peer.replace(settings))),
        },
    ));
    let state: Shared = Arc::new(AppState {
        tokens: Arc::clone(&live.tokens),
        access_log: Arc::clone(&live.access_log),
        engine,
        in_flight: Arc::new(Semaphore::new(config.concurrent_requests_max)),
        config,
        metrics,
        history,
        ready: AtomicBool::new(true),
        retention,
        edge_id,
        sink,
        fences,
        ingest,
        departing,
        handoff,
        republisher,
    });
    // Devices a handoff is moving (or moved) take no writes, from before the first request.
    handoff::send::refence(&state.handoff)?;
    reload_on_hangup(live, stop_rx.clone())?;
    // MQTT before the first request: a broker that refuses the account stops the start.
    let mqtt = match state.config.mqtt.clone() {
        Some(settings) => Some(mqtt::start(Arc::clone(&state), settings, stop_rx.clone()).await?),
        None => None,
    };
    let task = tokio::spawn(serve(state, (listener, tls), mqtt, stop_rx));
    tracing::info!(%addr, scheme, "roamkv serve listening on {scheme}://{addr}");
    Ok(Running {
        addr,
        scheme,
        stop,
        task,
    })
}

/// Devices whose departure waits for the cloud take no writes, from before the first request.
fn departing_fences(departing: &departing::Departing) -> Result<fence::Fences, String> {
    let fences = fence::Fences::default();
    for waiting in departing.list() {
        fences.fence(
            &waiting.device,
            "it is departing: its readings are on their way to the cloud",
        )?;
    }
    Ok(fences)
}

/// The engine with the server's settings (recovery may take a while: off the runtime's threads).
async fn open_engine(config: &Config) -> Result<Engine, String> {
    let options = Options {
        durability: config.durability,
        management_time_ms: config.management_time_ms,
        segment_bytes: config.sizes.segment_bytes,
        log_bytes_max: Some(config.sizes.log_budget_bytes),
        index_bytes_max: config.sizes.index_memory_bytes,
        lower_memory_bytes: config.sizes.lower_memory_bytes,
        fail_points: Arc::clone(&config.fail_points),
        ..Options::default()
    };
    let data = config.data.clone();
    tokio::task::spawn_blocking(move || Engine::open(&data, options))
        .await
        .map_err(|e| format!("opening the engine: {e}"))?
        .map_err(|e| format!("opening {}: {e}", config.data.display()))
}

/// The accept loop, then the shutdown sequence. Connections are served by hyper directly (not
/// axum::serve) for its header-read timeout, which cuts off clients that trickle headers; with
/// TLS, the handshake runs in the connection's task, bounded by the same timeout.
async fn serve(
    state: Shared,
    (listener, tls): (TcpListener, Option<Arc<settings::tls::Tls>>),
    mqtt: Option<JoinHandle<()>>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    // MQTT ingest first: it is waited for first at shutdown.
    let background: Vec<JoinHandle<()>> = mqtt
        .into_iter()
        .chain(spawn_background(&state, &stop))
        .collect();
    let app = routes::build(Arc::clone(&state));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(state.config.header_timeout);
    loop {
        let accepted = tokio::select! {
            _ = stop.changed() => break,
            accepted = listener.accept() => accepted,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                // Out of file descriptors and the like: wait a little instead of spinning.
                tracing::warn!(error = %e, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        // The client's address rides with each request (the access log names it).
        let service = TowerToHyperService::new(tower::ServiceExt::map_request(
            app.clone(),
            move |mut request: axum::extract::Request<hyper::body::Incoming>| {
                request
                    .extensions_mut()
                    .insert(axum::extract::ConnectInfo(peer));
                request
            },
        ));
        let watcher = graceful.watcher();
        let http = http.clone();
        let Some(tls) = &tls else {
            let connection = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
            tokio::spawn(async move {
                if let Err(e) = connection.await {
                    tracing::debug!(%peer, error = %e, "connection ended with an error");
                }
            });
            continue;
        };
        let (acceptor, timeout) = (tls.acceptor(), state.config.header_timeout);
        tokio::spawn(async move {
            let stream = match tokio::time::timeout(timeout, acceptor.accept(stream)).await {
                Ok(Ok(stream)) => stream,
                Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "TLS handshake failed"),
                Err(_) => return tracing::debug!(%peer, "TLS handshake timed out"),
            };
            let connection = watcher.watch(http.serve_connection(TokioIo::new(stream), service));
            if let Err(e) = connection.await {
                tracing::debug!(%peer, error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // The router holds the shared state (and with it the engine): drop it so that the engine
    // can be closed once the connections are done.
    drop(app);
    shut_down(state, graceful, background).await
}

/// The shutdown sequence, once no connection is accepted: in-flight requests finish (up to the
/// drain timeout), MQTT ingest and the other tasks stop, the sink lets go of the engine, and
/// the engine closes.
async fn shut_down(
    state: Shared,
    graceful: hyper_util::server::graceful::GracefulShutdown,
    background: Vec<JoinHandle<()>>,
) -> Result<(), String> {
    state.ready.store(false, Ordering::Relaxed);
    tracing::info!("shutting down: no new connections; finishing in-flight requests");
    let drain = state.config.drain_timeout;
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            seconds = drain.as_secs(),
            "requests still running after the drain timeout"
        );
    }
    tracing::info!("requests finished");
    // MQTT ingest stops (unacked messages stay with the broker), then the other tasks.
    for task in background {
        let _ = tokio::time::timeout(drain, task).await;
    }
    // The sink holds the engine until its task ends (it saw the stop signal).
    if let Some(sink) = &state.sink {
        sink.join().await;
    }
    // The ingest threads write what is queued and let go of the engine.
    let stopping = Arc::clone(&state);
    let _ = tokio::task::spawn_blocking(move || stopping.ingest.stop()).await;
    close_engine(state).await?;
    tracing::info!("engine closed");
    Ok(())
}

/// The tasks beside the HTTP server and MQTT ingest, each ending at the stop signal: the status
/// page's sampler, retention, departures waiting for the cloud, handoffs.
fn spawn_background(state: &Shared, stop: &watch::Receiver<bool>) -> Vec<JoinHandle<()>> {
    let mut tasks = Vec::new();
    tasks.push(tokio::spawn(sample_history(
        Arc::clone(state),
        stop.clone(),
    )));
    tasks.push(tokio::spawn(retention::run(
        Arc::clone(state),
        state.config.retention_interval,
        stop.clone(),
    )));
    if state.sink.is_some() {
        tasks.push(tokio::spawn(cloud::depart_after_cloud(
            Arc::clone(state),
            stop.clone(),
        )));
    }
    tasks.push(tokio::spawn(handoff::send::run(
        Arc::clone(&state.handoff),
        stop.clone(),
    )));
    tasks
}

/// Closes the engine once nothing else holds it (requests cut off by the drain timeout may
/// still hold it briefly; then the last holder's drop closes it).
async fn close_engine(state: Shared) -> Result<(), String> {
    let engine = Arc::clone(&state.engine);
    drop(state);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    let mut engine = engine;
    loop {
        match Arc::try_unwrap(engine) {
            Ok(engine) => {
                return tokio::task::spawn_blocking(move || engine.close())
                    .await
                    .map_err(|e| format!("closing the engine: {e}"))?
                    .map_err(|e| format!("closing the engine: {e}"));
            }
            Err(shared) if tokio::time::Instant::now() < deadline => {
                engine = shared;
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(_) => {
                tracing::warn!("engine still in use at exit; it closes when its last user ends");
                return Ok(());
            }
        }
    }
}

async fn sample_history(state: Shared, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    loop {
        tokio::select! {
            _ = stop.changed() => return,
            _ = tick.tick() => {}
        }
        let s = Arc::clone(&state);
        let data_dir_bytes =
            tokio::task::spawn_blocking(move || metrics::dir_bytes(s.engine.path()))
                .await
                .unwrap_or(0);
        let sample = Sample {
            at_ms: now_ms(),
            readings_total: state.metrics.readings_total(),
            data_dir_bytes,
        };
        state.history.lock().push_sample(sample);
    }
}

/// `roamkv serve`: runs until SIGINT or SIGTERM, then shuts down gracefully; a second signal
/// exits at once (the engine's recovery covers what was in flight).
pub fn run(args: &ServeArgs) -> Result<(), String> {
    let config = Config::resolve(args)?;
    let set_log_filter = observability::logs::init(&config.logs);
    let json_log = config.logs.format == settings::LogFormat::Json;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("starting the runtime: {e}"))?;
    runtime.block_on(async move {
        // The handlers go in before the engine opens: a SIGTERM during a long recovery is a
        // clean stop too (a service manager counts a death by the signal's default action as a
        // failure).
        let mut signals = StopSignals::install()?;
        // SIGHUP's default action ends the process: from here on it never does (tokio's handler
        // stays for the process's life; before the server runs, there is nothing to reload).
        let _early_hangup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())
            .map_err(|e| format!("installing SIGHUP handler: {e}"))?;
        let running = tokio::select! {
            running = start_serving(config, set_log_filter) => running?,
            _ = signals.next() => {
                tracing::info!("signal received while starting: not starting");
                return Ok(());
            }
        };
        // The address once more, plainly, for whoever reads a terminal (a JSON log has it in
        // the line above: every line of a JSON log is JSON).
        if !json_log {
            eprintln!(
                "roamkv serve: listening on {}://{}",
                running.scheme, running.addr
            );
        }
        signals.next().await;
        tracing::info!("signal received: shutting down (a second signal exits at once)");
        running.shutdown();
        tokio::spawn(async move {
            signals.next().await;
            tracing::warn!("second signal: exiting now");
            // _exit, not process::exit: exit() runs C++ static destructors (RocksDB's) while
            // RocksDB's and the engine's threads still run, which crashed the process with
            // SIGSEGV now and then (CI saw it). Exiting at once is the promise; the engine's
            // recovery covers what was in flight, as after kill -9.
            // SAFETY: _exit takes no pointers and does not return; nothing runs after it.
            unsafe { libc::_exit(130) }
        });
        running.wait().await
    })
}

/// SIGTERM and SIGINT, the signals that stop the server.
struct StopSignals {
    term: tokio::signal::unix::Signal,
    interrupt: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn install() -> Result<StopSignals, String> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            term: signal(SignalKind::terminate())
                .map_err(|e| format!("installing SIGTERM handler: {e}"))?,
            interrupt: signal(SignalKind::interrupt())
                .map_err(|e| format!("installing SIGINT handler: {e}"))?,
        })
    }

    async fn next(&mut self) {
        tokio::select! {
            _ = self.term.recv() => {}
            _ = self.interrupt.recv() => {}
        }
    }
}

/// SIGHUP reloads what can change while the server runs (settings/reload.rs: the TLS pair, the
/// tokens, the log level, the access log) until the server stops; it never stops the server.
fn reload_on_hangup(
    live: Arc<settings::reload::Live>,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangup =
        signal(SignalKind::hangup()).map_err(|e| format!("installing SIGHUP handler: {e}"))?;
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = stop.changed() => return,
                _ = hangup.recv() => {}
            }
            let live = Arc::clone(&live);
            match tokio::task::spawn_blocking(move || live.reload()).await {
                Ok(Ok(done)) if done.restart_needed.is_empty() => {
                    tracing::info!(applied = ?done.applied, "SIGHUP: settings reloaded");
                }
                Ok(Ok(done)) => tracing::warn!(
                    applied = ?done.applied,
                    restart_needed = ?done.restart_needed,
                    "SIGHUP: settings reloaded; these changed and take effect at a restart"
                ),
                Ok(Err(e)) => {
                    tracing::warn!(error = %e, "SIGHUP: the settings did not reload; nothing changed")
                }
                Err(e) => tracing::warn!(error = %e, "SIGHUP: the reload failed"),
            }
        }
    });
    Ok(())
}
