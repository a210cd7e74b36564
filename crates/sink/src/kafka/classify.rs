//! Kafka's errors sorted as the sink acts on them (`DbError`): another process under this
//! edge's identity (stop), a refusal a retry does not change (rights, credentials, settings),
//! and everything else, retried with a new producer.

use rdkafka::error::KafkaError;
use rdkafka::types::RDKafkaErrorCode;

use crate::error::DbError;

/// Whether the cluster refuses on grounds a retry does not change (rights, credentials), or
/// another process holds this edge's transactional id.
pub fn classify(context: &str, error: &KafkaError) -> DbError {
    let message = format!("{context}: {error}");
    match error.rdkafka_error_code() {
        Some(
            RDKafkaErrorCode::ProducerFenced
            | RDKafkaErrorCode::InvalidProducerEpoch
            | RDKafkaErrorCode::Fenced,
        ) => DbError::Fenced(format!(
            "{message}: another process started a Kafka producer under this edge's identity \
             (a copied data directory?)"
        )),
        Some(
            RDKafkaErrorCode::TopicAuthorizationFailed
            | RDKafkaErrorCode::ClusterAuthorizationFailed
            | RDKafkaErrorCode::TransactionalIdAuthorizationFailed
            | RDKafkaErrorCode::SaslAuthenticationFailed
            | RDKafkaErrorCode::Authentication
            | RDKafkaErrorCode::InvalidReplicationFactor
            | RDKafkaErrorCode::InvalidConfig
            | RDKafkaErrorCode::InvalidArgument,
        ) => DbError::Fatal(message),
        _ => DbError::Retryable(message),
    }
}
