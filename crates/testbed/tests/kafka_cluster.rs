//! The Kafka rig against itself: a 3-node KRaft cluster starts, takes a topic with replication 3
//! and min.insync.replicas 2, serves keyed records to a read_committed consumer, elects a new
//! leader when its partition's leader is killed with SIGKILL (records produced meanwhile are all
//! there), takes the killed node back, and is gone when it drops.

use std::time::{Duration, Instant};

use roamkv_testbed::kafka::{self, KafkaCluster};
use roamkv_testbed::prerequisite;

/// How long a killed leader's partition may go without a new leader (the session is 3 s).
const FAILOVER_MAX: Duration = Duration::from_secs(20);

#[test]
fn a_three_node_cluster_serves_and_survives_its_leader_killed() {
    if let Some(why) = kafka::missing() {
        prerequisite::unmet("kafka_cluster", &why);
        return;
    }
    let mut cluster = KafkaCluster::start(3).expect("a 3-node cluster");
    eprintln!("kafka cluster: 3 nodes up in {:?}", cluster.startup);
    cluster
        .create_topic("readings", 1, &["min.insync.replicas=2"])
        .expect("create the topic");
    let first: Vec<(String, String)> = (0..50)
        .map(|i| (format!("dev-{}", i % 5), i.to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = first
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    cluster.produce("readings", &refs).expect("produce");

    let leader = wait_for_leader(&cluster, None);
    cluster.kill(leader);
    let killed_at = Instant::now();
    let new_leader = wait_for_leader(&cluster, Some(leader));
    eprintln!(
        "kafka cluster: node {leader} killed, node {new_leader} leads after {:?}",
        killed_at.elapsed()
    );

    let second: Vec<(String, String)> = (50..100)
        .map(|i| (format!("dev-{}", i % 5), i.to_string()))
        .collect();
    let refs: Vec<(&str, &str)> = second
        .iter()
        .map(|(k, v)| (k.as_str(), v.as_str()))
        .collect();
    cluster
        .produce("readings", &refs)
        .expect("produce with one node down");
    let restarted = Instant::now();
    cluster.restart(leader).expect("the killed node back");
    eprintln!(
        "kafka cluster: node {leader} back in {:?}",
        restarted.elapsed()
    );

    let got = cluster.consume("readings", 100).expect("consume");
    let want: Vec<String> = first
        .iter()
        .chain(&second)
        .map(|(k, v)| format!("{k}:{v}"))
        .collect();
    assert_eq!(got, want, "one partition: every record once, in order");
}

/// Polls the leader of partition 0 until there is one other than `not`.
fn wait_for_leader(cluster: &KafkaCluster, not: Option<u32>) -> u32 {
    let deadline = Instant::now() + FAILOVER_MAX;
    loop {
        if let Ok(Some(id)) = cluster.leader("readings", 0)
            && Some(id) != not
        {
            return id;
        }
        assert!(
            Instant::now() < deadline,
            "no new leader within {FAILOVER_MAX:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
