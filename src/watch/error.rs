//! [`WatchError`]: why a Pod (or a mirror-configuring object) cannot be read into what the
//! watch keeps, and the watch's [`Result`].

use crate::workload::WorkloadError;

/// Why a Pod (or a mirror-configuring object) cannot be read into what the watch keeps.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WatchError {
    /// A required field is absent, null or empty.
    #[error("{field} is missing")]
    Missing { field: &'static str },
    /// A field has the wrong JSON type or a value the API never stores.
    #[error("{field} is not {expected}")]
    Invalid {
        field: String,
        expected: &'static str,
    },
    /// A string is longer than the API lets that field be (see [`super::pod`] for each bound).
    #[error("{field} is {len} bytes long, more than the {max} the watch keeps")]
    TooLong {
        field: String,
        len: usize,
        max: usize,
    },
    /// A list has more entries than the watch keeps per Pod.
    #[error("{field} has {count} entries, more than the {max} the watch keeps")]
    TooMany {
        field: &'static str,
        count: usize,
        max: usize,
    },
    /// The PodSpec's image lists cannot be walked.
    #[error("cannot read the pod's images")]
    Spec(#[source] WorkloadError),
}

pub type Result<T, E = WatchError> = std::result::Result<T, E>;
