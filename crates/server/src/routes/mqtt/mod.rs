//! MQTT ingest: subscribes to EdgeX's event topic on the message bus and writes each event it
//! carries. QoS 1 with manual acks: a message is acked only after the engine accepted its event
//! (with sync durability: after the fdatasync), so a crash before the ack makes the broker
//! deliver it again. A persistent session (clean_session = false) keeps messages that arrive
//! while the server is down.
//!
//! The broker may be plain (`host:port`) or TLS (`mqtts://host:port`: rustls, the system's CAs
//! and --mqtt-ca-file's), with an account (--mqtt-username, --mqtt-password-file). A refusal
//! of the account or a failed TLS handshake at start is an error naming the setting (`start`).
//!
//! Payloads are EdgeX MessageEnvelopes (envelope.rs). A message that is not an event is logged,
//! counted in roamkv_rejected{source="mqtt"} and acked (redelivering it would only fail again).
//!
//! Memory is bounded: messages read from the broker wait for one of `IN_FLIGHT_EVENTS_MAX`
//! write slots in a queue of at most `--mqtt-queue-bytes-max` (queue.rs); at that bound the
//! event loop stops reading from the broker, and TCP holds the broker back.

mod envelope;
mod queue;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use roamkv_sink::explain::{self, Dialed, Peer};
use roamkv_wire::edgex::PathNames;
use rumqttc::{
    AsyncClient, ConnectReturnCode, ConnectionError, Event, MqttOptions, Packet, Publish, QoS,
    TlsConfiguration, Transport,
};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore, mpsc, oneshot, watch};
use tokio::task::JoinHandle;

use crate::ingest::writers::{INGEST_GROUP_REQUESTS_MAX, INGEST_THREADS};
use crate::settings::MqttConfig;
use crate::state::Shared;
pub use envelope::parse_envelope;
use envelope::topic_names;
use queue::Queue;

/// Events being written at once from MQTT: enough to fill both ingest threads' groups (one being
/// written while the other waits for its fdatasync), since an event's write takes a group commit
/// or two and events in flight / write time is the rate (64 held QoS 1 at ~9 K events a second
/// with a 4 ms fdatasync: docs/BENCHMARKS.md, "The message bus"). Messages beyond it wait,
/// unacked, in the bounded `Queue`. Memory: the events' readings, ~1,024 x 10 KB at 10
/// readings an event.
const IN_FLIGHT_EVENTS_MAX: usize = INGEST_THREADS * INGEST_GROUP_REQUESTS_MAX;
/// How long a stopping server lets the events being written finish and their acks go out.
const IN_FLIGHT_DRAIN_WAIT: Duration = Duration::from_secs(5);
/// Reconnects wait this long after the first failure, twice as long after each further one, up
/// to `RECONNECT_DELAY_MAX`; a connection resets it.
const RECONNECT_DELAY_MIN: Duration = Duration::from_secs(1);
const RECONNECT_DELAY_MAX: Duration = Duration::from_secs(30);

/// How long the start waits for the broker's first answer. A broker that refuses the
/// credentials or fails the TLS handshake stops the start with an error naming the setting; one
/// that cannot be reached yet (EdgeX services start in any order) or says nothing in this time
/// is logged, and the client keeps trying in the background.
const FIRST_ANSWER_WAIT: Duration = Duration::from_secs(10);

/// What the broker said first.
enum FirstAnswer {
    Connected,
    /// Not reachable: worth retrying.
    Unreachable(String),
    /// Refused the credentials or failed TLS: retrying the same settings cannot help.
    Refused(String),
}

/// Starts MQTT ingest once the broker has accepted the client, or has not answered yet; a
/// refusal is an error.
pub async fn start(
    state: Shared,
    config: MqttConfig,
    stop: watch::Receiver<bool>,
) -> Result<JoinHandle<()>, String> {
    let options = client_options(&config, state.config.body_bytes_max)?;
    let broker = format!("{}:{}", config.host, config.port);
    let (first_answer, answered) = oneshot::channel();
    let task = tokio::spawn(run(state, config, options, stop, first_answer));
    match tokio::time::timeout(FIRST_ANSWER_WAIT, answered).await {
        Ok(Ok(FirstAnswer::Connected)) | Ok(Err(_)) => Ok(task),
        Ok(Ok(FirstAnswer::Unreachable(error))) => {
            tracing::warn!(%broker, %error, "MQTT broker not reachable yet; retrying, backing off to 30 s");
            Ok(task)
        }
        Ok(Ok(FirstAnswer::Refused(message))) => {
            task.abort();
            Err(message)
        }
        Err(_) => {
            tracing::warn!(%broker, "no answer from the MQTT broker yet; still trying");
            Ok(task)
        }
    }
}

/// The client's options: a persistent session with manual acks, TLS for an mqtts:// broker,
/// the account when one is given.
fn client_options(config: &MqttConfig, body_bytes_max: usize) -> Result<MqttOptions, String> {
    let mut options = MqttOptions::new(&config.client_id, &config.host, config.port);
    options.set_keep_alive(Duration::from_secs(10));
    options.set_manual_acks(true);
    options.set_clean_session(false);
    let packet_max = body_bytes_max.saturating_mul(2);
    options.set_max_packet_size(packet_max, packet_max);
    if let Some(tls) = &config.tls {
        let client = roamkv_sink::tls::client_config(tls.ca_file.as_deref(), "--mqtt-ca-file")?;
        options.set_transport(Transport::tls_with_config(TlsConfiguration::Rustls(
            Arc::new(client),
        )));
    }
    if let Some(username) = &config.username {
        options.set_credentials(username, config.password.clone().unwrap_or_default());
    }
    Ok(options)
}

/// Why a broker would not have us, naming the setting to fix; None when retrying may help.
fn refusal(config: &MqttConfig, error: &ConnectionError) -> Option<String> {
    let broker = format!("{}:{}", config.host, config.port);
    match error {
        ConnectionError::ConnectionRefused(code) => Some(match (code, &config.username) {
            (
                ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized,
                Some(user),
            ) => format!(
                "the MQTT broker {broker} refused the credentials ({code:?}): check \
                 --mqtt-username {user:?} and --mqtt-password-file"
            ),
            (ConnectReturnCode::BadUserNamePassword | ConnectReturnCode::NotAuthorized, None) => {
                format!(
                    "the MQTT broker {broker} refused the connection ({code:?}): it wants an \
                     account: give --mqtt-username and --mqtt-password-file"
                )
            }
            (ConnectReturnCode::BadClientId, _) => format!(
                "the MQTT broker {broker} refused the client id {:?} (--mqtt-client-id)",
                config.client_id
            ),
            (other, _) => format!("the MQTT broker {broker} refused the connection: {other:?}"),
        }),
        ConnectionError::Tls(e) => {
            // The one translation of TLS failures (roamkv_sink::explain): what is wrong with
            // the broker's certificate and what to do, with the openssl commands.
            let dialed = Dialed {
                host: config.host.clone(),
                port: config.port,
                tls: true,
                peer: Peer::Broker,
                ca_setting: "--mqtt-ca-file".into(),
            };
            Some(match explain::explain(e, &dialed) {
                Some(sentence) => format!("TLS failed: {sentence} ({})", explain::chain(e)),
                None => format!(
                    "TLS with the MQTT broker {broker} failed: {} (is it an mqtts:// broker \
                     whose certificate names {:?}, signed by a CA the system or \
                     --mqtt-ca-file trusts?)",
                    explain::chain(e),
                    config.host
                ),
            })
        }
        _ => None,
    }
}

/// Says what a failed connection means: to the start, while it waits for the first answer (a
/// refusal ends the client: true), or in the log (a refusal after the client was once accepted,
/// say a password changed under a running server, is an error; it keeps trying).
fn report_failure(
    config: &MqttConfig,
    error: &ConnectionError,
    first_answer: &mut Option<oneshot::Sender<FirstAnswer>>,
    retry_in: Duration,
) -> bool {
    match (first_answer.take(), refusal(config, error)) {
        (Some(tx), Some(message)) => {
            let _ = tx.send(FirstAnswer::Refused(message));
            true
        }
        (Some(tx), None) => {
            let _ = tx.send(FirstAnswer::Unreachable(error.to_string()));
            false
        }
        (None, Some(message)) => {
            tracing::error!(retry_in_s = retry_in.as_secs(), "{message}");
            false
        }
        (None, None) => {
            tracing::warn!(%error, retry_in_s = retry_in.as_secs(), "MQTT connection lost");
            false
        }
    }
}

/// Requests (acks, subscriptions, published events) queued to the MQTT client's event loop;
/// a republished event that finds the queue full is dropped from the bus (republish.rs).
const MQTT_REQUESTS_QUEUED_MAX: usize = 64;

/// The event loop: subscribes on every connection, writes each event it carries, reconnects
/// (backing off from 1 s to 30 s) until the stop signal.
///
/// It awaits nothing but the broker (while the queue has room), the stop signal and, while
/// messages wait, a write slot: only it drains the client's request queue, so awaiting a send
/// into that queue (a subscription) while the queue is full of republished events would stop it
/// for good. For the same reason a write slot is freed when its write ends, before its ack is
/// queued: with the queue at its bound the loop waits for a slot, not for an ack it alone sends.
async fn run(
    state: Shared,
    config: MqttConfig,
    options: MqttOptions,
    mut stop: watch::Receiver<bool>,
    first_answer: oneshot::Sender<FirstAnswer>,
) {
    let (client, mut events) = AsyncClient::new(options, MQTT_REQUESTS_QUEUED_MAX);
    state.republisher.attach(client.clone());
    let in_flight = Arc::new(Semaphore::new(IN_FLIGHT_EVENTS_MAX));
    let unfinished = Arc::new(Unfinished::default());
    let acks = spawn_acker(client.clone());
    state
        .metrics
        .mqtt
        .writes_in_flight_max
        .set(IN_FLIGHT_EVENTS_MAX as i64);
    let mut queue = Queue::new(config.queue_bytes_max, &state.metrics);
    let mut first_answer = Some(first_answer);
    let mut reconnect_delay = RECONNECT_DELAY_MIN;
    loop {
        let event = tokio::select! {
            _ = stop.changed() => break,
            permit = Arc::clone(&in_flight).acquire_owned(), if !queue.is_empty() => {
                let (Ok(permit), Some(publish)) = (permit, queue.pop(&state.metrics)) else {
                    break;
                };
                spawn_write(&state, &acks, publish, permit, &unfinished);
                continue;
            }
            // Not polled at the queue's bound: rumqttc reads the socket only when polled.
            event = events.poll(), if queue.has_room() => event,
        };
        match event {
            Ok(Event::Incoming(Packet::ConnAck(_))) => {
                reconnect_delay = RECONNECT_DELAY_MIN;
                if let Some(tx) = first_answer.take() {
                    let _ = tx.send(FirstAnswer::Connected);
                }
                tracing::info!(broker = %format!("{}:{}", config.host, config.port), tls = config.tls.is_some(), topic = %config.topic, "MQTT connected");
                let (client, topic) = (client.clone(), config.topic.clone());
                tokio::spawn(async move {
                    if let Err(e) = client.subscribe(&topic, QoS::AtLeastOnce).await {
                        tracing::error!(error = %e, "MQTT subscribe failed");
                    }
                });
            }
            Ok(Event::Incoming(Packet::SubAck(_))) => {
                // Subscribed: from here on the broker routes the topic's events to us.
                state.metrics.mqtt.connected.set(1);
            }
            Ok(Event::Incoming(Packet::Publish(publish))) => queue.push(publish, &state.metrics),
            Ok(_) => {}
            Err(e) => {
                state.metrics.mqtt.connected.set(0);
                // Not acked on this connection: the broker delivers them again on the next.
                queue.clear(&state.metrics);
                if report_failure(&config, &e, &mut first_answer, reconnect_delay) {
                    // Refused at start: the start fails with it; nothing was received yet.
                    return;
                }
                tokio::select! {
                    _ = stop.changed() => break,
                    _ = tokio::time::sleep(reconnect_delay) => {}
                }
                reconnect_delay = (reconnect_delay * 2).min(RECONNECT_DELAY_MAX);
            }
        }
    }
    drain_and_disconnect(&client, &mut events, &unfinished).await;
    state.metrics.mqtt.connected.set(0);
}

/// Writes and acks not finished yet: the stop waits for them (`all_finished`).
#[derive(Default)]
struct Unfinished {
    count: AtomicUsize,
    finished: Notify,
}

/// One write and its ack, counted in `Unfinished` until dropped.
struct UnfinishedGuard(Arc<Unfinished>);

impl Unfinished {
    fn start(self: &Arc<Self>) -> UnfinishedGuard {
        self.count.fetch_add(1, Ordering::SeqCst);
        UnfinishedGuard(Arc::clone(self))
    }

    async fn all_finished(&self) {
        loop {
            let finished = self.finished.notified();
            if self.count.load(Ordering::SeqCst) == 0 {
                return;
            }
            finished.await;
        }
    }
}

impl Drop for UnfinishedGuard {
    fn drop(&mut self) {
        if self.0.count.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.finished.notify_waiters();
        }
    }
}

/// A written event's ack, on its way to the client's request queue: the packet id, and the
/// write counted in `Unfinished` until the ack is queued.
struct Ack {
    publish: Publish,
    _unfinished: UnfinishedGuard,
}

/// Queues the acks of written events into the client's request queue, one at a time, in the
/// order the writes ended. One task awaits that queue when it is full, not one per event:
/// flume's bounded channel (rumqttc's request queue) keeps its waiting senders in a list it
/// scans on every wake-up, so a writer task per event awaiting its ack cost each send O(waiters)
/// (1-reading events at QoS 1: 73 µs of server CPU a reading against 21, 28 % of the profile in
/// `VecDeque::retain`, with the acks of ~18,000 events a second waiting). The acks waiting here
/// are bounded by the broker: a session has at most 65,535 packet ids unacked.
fn spawn_acker(client: AsyncClient) -> mpsc::UnboundedSender<Ack> {
    let (acks, mut waiting) = mpsc::unbounded_channel::<Ack>();
    tokio::spawn(async move {
        while let Some(ack) = waiting.recv().await {
            if let Err(e) = client.ack(&ack.publish).await {
                tracing::warn!(error = %e, "MQTT ack failed");
            }
        }
    });
    acks
}

/// Writes a received message's event on a task of its own, and hands its ack to the acker once
/// written. The write slot and the message's bytes are freed when the write ends; the ack keeps
/// only the packet id.
fn spawn_write(
    state: &Shared,
    acks: &mpsc::UnboundedSender<Ack>,
    publish: Publish,
    permit: OwnedSemaphorePermit,
    unfinished: &Arc<Unfinished>,
) {
    let state = Arc::clone(state);
    let acks = acks.clone();
    let unfinished = unfinished.start();
    state.metrics.mqtt.writes_in_flight.inc();
    tokio::spawn(async move {
        let written = handle(&state, &publish).await;
        let mut ack = Publish::new("", publish.qos, Vec::new());
        ack.pkid = publish.pkid;
        drop(publish);
        drop(permit);
        state.metrics.mqtt.writes_in_flight.dec();
        // QoS 0 has no ack; an event not written is not acked (the broker sends it again).
        if written && ack.qos != QoS::AtMostOnce {
            let _ = acks.send(Ack {
                publish: ack,
                _unfinished: unfinished,
            });
        }
    });
}

/// At stop: lets the events being written finish while the event loop still runs, so that
/// their acks go out (up to `IN_FLIGHT_DRAIN_WAIT`), then leaves the broker. Messages that were
/// waiting for a write slot are not acked: the broker delivers them again to the next server.
async fn drain_and_disconnect(
    client: &AsyncClient,
    events: &mut rumqttc::EventLoop,
    unfinished: &Unfinished,
) {
    let all_written = unfinished.all_finished();
    tokio::pin!(all_written);
    let drained = tokio::time::timeout(IN_FLIGHT_DRAIN_WAIT, async {
        loop {
            tokio::select! {
                _ = &mut all_written => return,
                polled = events.poll() => if polled.is_err() {
                    // No connection to ack on; the writes finish or not without it.
                    let _ = (&mut all_written).await;
                    return;
                }
            }
        }
    })
    .await;
    if drained.is_err() {
        tracing::warn!(
            "MQTT events still being written at stop; the broker will deliver them again"
        );
    }
    // Not awaited: with the request queue full nothing would drain it. Unsent, the connection
    // closes when the event loop is dropped, and the broker keeps the session all the same.
    let _ = client.try_disconnect();
    let _ = tokio::time::timeout(Duration::from_millis(500), events.poll()).await;
}

/// Writes the event a message carries. True when the message should be acked: the event was
/// written, or the message can never be written (bad input, counted and logged).
async fn handle(state: &Shared, publish: &Publish) -> bool {
    let request = match parse_envelope(&publish.payload) {
        Ok(r) => r,
        Err(e) => {
            state.reject("mqtt", &e);
            tracing::warn!(topic = %publish.topic, error = %e.message, "MQTT message rejected");
            return true;
        }
    };
    let path = topic_names(&publish.topic).map(|(profile, device, source)| PathNames {
        profile_name: profile,
        device_name: device,
        source_name: source,
    });
    match state
        .ingest_event(request.view(), path, "mqtt", publish.payload.len())
        .await
    {
        Ok(_) => true,
        Err(e) if e.status.is_client_error() => {
            tracing::warn!(topic = %publish.topic, error = %e.message, "MQTT event rejected");
            true
        }
        Err(e) => {
            // Not acked: the broker delivers it again after a reconnect.
            tracing::error!(topic = %publish.topic, error = %e.message, "MQTT event not written");
            false
        }
    }
}
