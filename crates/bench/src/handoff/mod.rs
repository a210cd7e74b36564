//! `roamkv bench handoff`: devices moving between two real `roamkv serve` processes (edges A and
//! B, each on its own ext4 on a loop device) over real links, with the cloud's PostgreSQL and the
//! load generator, each in a network namespace of its own (net.rs), the links shaped with
//! `tc tbf`, lossy through nftables and delayed by the harness's relay (relay.rs). Three phases
//! (docs/BENCHMARKS.md, "Handoff across real links"):
//!
//! - **latency** and **bulk** (transfer.rs): how long a handoff of an upper-tier device takes, and
//!   what share of the link a large one uses;
//! - **faults** (rounds.rs): seeded rounds of fleets moving A -> B -> A while their writers write,
//!   with kill -9 of either edge or of the postmaster and cuts of any link, every round checked
//!   against the writers' ledger (ledger.rs) at both edges and in the cloud.
//!
//! Everything it makes is undone on every path out: the servers and PostgreSQL stopped, the
//! namespaces (and with them the veths, qdiscs and rules) deleted, the file systems unmounted and
//! their loop devices detached.

mod args;
mod edge;
mod ledger;
mod net;
mod relay;
mod report;
mod rounds;
mod transfer;

use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rand::SeedableRng;
use roamkv_testbed::postgres::{Cluster, Placement};
use roamkv_testbed::report::MachineHeader;

pub use args::{HandoffBenchArgs, Phase};

use crate::error::{BenchError, Result};
use edge::{EDGE_PORT, NetEdge};
use net::{HUB_IP, InNamespace, LinkShape, Net, Node};

/// Relay ports on the hub: each edge reached by the other, the cloud, the link probe.
const VIA_B_PORT: u16 = 7101;
const VIA_A_PORT: u16 = 7102;
const VIA_CLOUD_PORT: u16 = 7103;
const VIA_PROBE_PORT: u16 = 7104;
/// Where the link probe's receiver listens in B's namespace.
const PROBE_PORT: u16 = 7999;
/// Seconds of the link probe.
const PROBE_SECONDS: f64 = 5.0;

pub fn run(args: &HandoffBenchArgs) -> ExitCode {
    match bench(args) {
        Ok(0) => ExitCode::SUCCESS,
        Ok(failures) => {
            eprintln!(
                "roamkv bench handoff: {failures} readings lost, phantom, duplicated or departed early: see {}",
                args.out.join("results.json").display()
            );
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("roamkv bench handoff: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the phases; the count of failures (lost, phantom, duplicates, early departs).
fn bench(args: &HandoffBenchArgs) -> Result<u64> {
    roamkv_testbed::prerequisite::require_root()?;
    let args = args::effective(args);
    std::fs::create_dir_all(&args.out).map_err(|e| BenchError::io("creating", &args.out, e))?;
    let header = MachineHeader::collect();
    // Dropped in the reverse order: the edges and PostgreSQL stop before the relay, the harness
    // leaves the load's namespace, and the namespaces go last.
    let mut net = Net::create(LinkShape {
        rate_mbit: args.rate_mbit,
        loss_permille: 0,
    })?;
    // The harness talks from the load's namespace; threads it starts from here on do too.
    let _in_load = InNamespace::enter(&net.namespace(Node::Load))?;
    let pg_dir =
        tempfile::tempdir().map_err(|e| BenchError::os("a directory for PostgreSQL", e))?;
    let pg = Cluster::create_placed(
        pg_dir.path(),
        pg_dir.path(),
        "",
        Placement {
            listen: Some(Node::Cloud.ip().into()),
            netns: Some(net.namespace(Node::Cloud)),
            tls: None,
        },
    )?;
    let _relay = relay::Relay::start(
        &net.hub(),
        &[
            (hub(VIA_B_PORT), at(Node::B, EDGE_PORT)),
            (hub(VIA_A_PORT), at(Node::A, EDGE_PORT)),
            (hub(VIA_CLOUD_PORT), at(Node::Cloud, pg.port())),
            (hub(VIA_PROBE_PORT), at(Node::B, PROBE_PORT)),
        ],
        Duration::from_millis(args.delay_ms) / 2,
    )?;
    let edges = [
        NetEdge::start(&net, Node::A, None, &args.out)?,
        NetEdge::start(&net, Node::B, None, &args.out)?,
    ];
    println!(
        "roamkv bench handoff: edges A and B, PostgreSQL and the load in network namespaces; links {}, +{} ms round trip through the relay; phases {:?}",
        match args.rate_mbit {
            0 => "unshaped".to_string(),
            r => format!("{r} Mbit/s"),
        },
        args.delay_ms,
        args.phases
    );
    let transfer = transfer_phases(&args, &net, &edges)?;
    let mut rounds = Vec::new();
    if args.phases.contains(&Phase::Faults) {
        forget_transfer_devices(&edges[1], &args)?;
        net.set_loss(args.loss_permille)?;
        let stopped;
        (rounds, stopped) = fault_phase(&args, &net, edges, pg)?;
        if let Some(e) = stopped {
            // What the rounds before it found is reported all the same.
            report::write(&args, &header, &net.shape, &transfer, &rounds)?;
            return Err(e);
        }
    }
    report::write(&args, &header, &net.shape, &transfer, &rounds)
}

/// The relay's address on the hub for `port`.
fn hub(port: u16) -> SocketAddr {
    SocketAddr::from((HUB_IP, port))
}

/// `node`'s address at `port`.
fn at(node: Node, port: u16) -> SocketAddr {
    SocketAddr::from((node.ip(), port))
}

/// Each edge's URL through the relay: what the other edge hands to.
fn via() -> [String; 2] {
    [
        format!("http://{}", hub(VIA_A_PORT)),
        format!("http://{}", hub(VIA_B_PORT)),
    ]
}

/// The bulk and latency phases asked for, A to B: the bulk first, on edges that have written
/// and departed nothing yet (A's device writes during it are the handoff's alone, not a
/// maintenance pass over what earlier phases left), its device then departed at B (a DEPART:
/// B's maintenance does not move it into the lower tier under the latency phase).
fn transfer_phases(
    args: &HandoffBenchArgs,
    net: &Net,
    [a, b]: &[NetEdge; 2],
) -> Result<transfer::TransferResults> {
    let mut transfer = transfer::TransferResults::default();
    let to_b = &via()[1];
    if args.phases.contains(&Phase::Bulk) {
        transfer.link_payload_bytes_per_sec = relay::probe_link(
            &net.namespace(Node::A),
            &net.namespace(Node::B),
            at(Node::B, PROBE_PORT),
            hub(VIA_PROBE_PORT),
            PROBE_SECONDS,
        )?;
        transfer::bulk(a, b, to_b, args.bulk_mib, args.value_bytes, &mut transfer)?;
        depart(b, transfer::BULK_DEVICE)?;
    }
    if args.phases.contains(&Phase::Latency) {
        let (handoffs, readings) = (args.latency_handoffs, args.readings);
        transfer::latency(
            a,
            b,
            to_b,
            handoffs,
            readings,
            args.value_bytes,
            &mut transfer,
        )?;
    }
    Ok(transfer)
}

/// The fault rounds: both edges restarted with their sinks into the cloud, then the rounds.
fn fault_phase(
    args: &HandoffBenchArgs,
    net: &Net,
    edges: [NetEdge; 2],
    pg: Cluster,
) -> Result<(Vec<rounds::RoundResult>, Option<BenchError>)> {
    let sink_url = format!("postgres://postgres@{}/postgres", hub(VIA_CLOUD_PORT));
    let mut rig = rounds::Rig {
        net,
        edges,
        pg,
        via: via(),
        writer: ledger::WriterSpec {
            urls: [
                format!("http://{}", at(Node::A, EDGE_PORT)),
                format!("http://{}", at(Node::B, EDGE_PORT)),
            ],
            readings_per_request: 10,
            value_bytes: 100,
            pause: Duration::from_millis(20),
            timeout: Duration::from_secs(5),
        },
    };
    for edge in &mut rig.edges {
        edge.restart_with_sink(sink_url.clone())?;
    }
    install_send_counter(&rig.pg)?;
    Ok(run_rounds(&mut rig, args))
}

/// The transfer phases' devices are departed at B (a DEPART each: nothing rewritten), so the
/// sinks the fault rounds start find only the rounds' fleets.
fn forget_transfer_devices(b: &NetEdge, args: &HandoffBenchArgs) -> Result<()> {
    (0..args.latency_handoffs).try_for_each(|i| depart(b, &format!("car-{i}")))
}

/// Departs `device` at `edge` (nothing to do if it is not there).
fn depart(edge: &NetEdge, device: &str) -> Result<()> {
    let (status, body) = edge.call("DELETE", &format!("/devices/{device}"), None)?;
    if !matches!(status, 200 | 202 | 204 | 404) {
        return Err(BenchError::HttpStatus {
            request: format!("departing {device} at edge {}", edge.node.name()),
            status,
            body: body.to_string(),
        });
    }
    Ok(())
}

/// Waits until a sink made its table, then counts every row's committed sends.
fn install_send_counter(pg: &Cluster) -> Result<()> {
    let started = Instant::now();
    while pg
        .psql(&["-c", "SELECT to_regclass('roamkv_readings')"])?
        .trim()
        .is_empty()
    {
        if started.elapsed() > Duration::from_secs(60) {
            return Err(BenchError::Run("no sink made its table within 60 s".into()));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    pg.psql(&["-c", roamkv_testbed::postgres::COUNT_SENDS_SQL])?;
    Ok(())
}

/// The rounds, until the last or the first that cannot finish (a handoff stuck, a sink that does
/// not catch up, Ctrl-C): the results so far, and what stopped them.
fn run_rounds(
    rig: &mut rounds::Rig,
    args: &HandoffBenchArgs,
) -> (Vec<rounds::RoundResult>, Option<BenchError>) {
    let mut rng = rand::rngs::StdRng::seed_from_u64(args.seed);
    let bar = indicatif::ProgressBar::new(args.rounds as u64).with_style(
        indicatif::ProgressStyle::with_template(
            "faults {bar:30} {pos}/{len} rounds, {elapsed} {msg}",
        )
        .expect("a valid template"),
    );
    let epoch = Instant::now();
    let mut results = Vec::new();
    let mut failures = 0;
    for r in 0..args.rounds {
        if roamkv_testbed::fixture::interrupted() {
            return (
                results,
                Some(BenchError::Run(format!("interrupted after {r} rounds"))),
            );
        }
        let result = match rounds::round(rig, r, &mut rng, epoch) {
            Ok(result) => result,
            Err(e) => {
                bar.abandon();
                return (results, Some(BenchError::Run(format!("round {r}: {e}"))));
            }
        };
        failures += result.failures();
        if result.failures() > 0 {
            roamkv_testbed::report::say(
                &bar,
                format!(
                    "round {r} ({}): edge {:?}, cloud {:?}, duplicates {}, early departs {}",
                    result
                        .faults
                        .iter()
                        .map(|f| f.fault.name())
                        .collect::<Vec<_>>()
                        .join(", "),
                    result.edge,
                    result.cloud,
                    result.duplicates,
                    result.early_departs
                ),
            );
        }
        bar.set_message(format!("failures {failures}"));
        bar.inc(1);
        if bar.is_hidden() && (r + 1) % 10 == 0 {
            // Not a terminal (a log file, CI): a line every ten rounds instead of the bar.
            eprintln!(
                "faults: {}/{} rounds, failures {failures}",
                r + 1,
                args.rounds
            );
        }
        results.push(result);
    }
    bar.finish();
    (results, None)
}
