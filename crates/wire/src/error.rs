//! What is wrong with an input to the wire contract, sorted by what the caller can do about it:
//! the server answers each kind with its own HTTP status (`From<WireError> for ApiError`), the
//! bench and the CLI print the message. The message is the whole answer a client sees.

/// Why a body, an event or a name was refused (or, once, could not be encoded).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    /// The input breaks the contract (malformed, a bad id, a field that does not match): the
    /// server's 400. Sending it again unchanged fails again.
    #[error("{message}")]
    BadInput { message: String },
    /// The input is well formed but over a limit the caller chose to send (readings in an event,
    /// records in a batch): the server's 413. Split, it may pass.
    #[error("{message}")]
    TooLarge { message: String },
    /// A checked reading could not be encoded in the stored form: a bug, not the caller's
    /// fault (the server's 500).
    #[error("{message}")]
    Encoding { message: String },
}

impl WireError {
    pub fn bad_input(message: impl Into<String>) -> WireError {
        WireError::BadInput {
            message: message.into(),
        }
    }

    pub fn too_large(message: impl Into<String>) -> WireError {
        WireError::TooLarge {
            message: message.into(),
        }
    }

    /// The message, without the kind: what a client is told.
    pub fn message(&self) -> &str {
        match self {
            WireError::BadInput { message }
            | WireError::TooLarge { message }
            | WireError::Encoding { message } => message,
        }
    }

    /// The message, without the kind, for a caller that adds its own context.
    pub fn into_message(self) -> String {
        match self {
            WireError::BadInput { message }
            | WireError::TooLarge { message }
            | WireError::Encoding { message } => message,
        }
    }
}
