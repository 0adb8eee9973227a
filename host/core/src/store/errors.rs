//! The typed errors of a backend's building blocks (below the ports, which answer
//! [`ExecutionError`](crate::ExecutionError)): a setting or a server the backend cannot use,
//! and a stored value it cannot decode. Each carries a message already free of secrets.

/// A DSN, a pool setting, a TLS file or a server version the backend cannot use.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct SetupError(pub String);

impl From<String> for SetupError {
    fn from(message: String) -> Self {
        SetupError(message)
    }
}

impl From<&str> for SetupError {
    fn from(message: &str) -> Self {
        SetupError(message.to_owned())
    }
}

/// A stored value that does not decode (the message names the column and the reason).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct DecodeError(pub String);

impl From<String> for DecodeError {
    fn from(message: String) -> Self {
        DecodeError(message)
    }
}

impl From<&str> for DecodeError {
    fn from(message: &str) -> Self {
        DecodeError(message.to_owned())
    }
}

impl From<DecodeError> for crate::error::ExecutionError {
    fn from(e: DecodeError) -> Self {
        crate::error::ExecutionError::Undecodable(e.0)
    }
}
