//! Errors: MPI's error classes, a message naming the call and the
//! argument, and the error codes that carry both back to C.
//!
//! An error code is the class in bits 0–6 and, above them, the serial
//! number of its message in a small table of recent messages, so that
//! `MPI_Error_class` needs no table and `MPI_Error_string` gives the full
//! message while it is recent (the class's description after that).

use crate::abi::*;
use bcl::coll::CollError;
use std::ffi::c_int;

/// A failed call: its MPI error class and what went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MpiError {
    /// The MPI error class (`MPI_ERR_…`).
    pub class: c_int,
    /// What went wrong, for a person.
    pub message: String,
    /// The communicator whose error handler it goes to, when that is not
    /// the call's (a request's communicator, in the wait and test calls).
    pub on: Option<MPI_Comm>,
}

impl MpiError {
    /// An error of `class`.
    pub fn new(class: c_int, message: impl Into<String>) -> MpiError {
        MpiError {
            class,
            message: message.into(),
            on: None,
        }
    }

    /// The same error, raised on `comm` unless it already names one.
    pub fn on(mut self, comm: MPI_Comm) -> MpiError {
        self.on.get_or_insert(comm);
        self
    }
}

/// What a call returns inside the library.
pub type MpiResult<T = ()> = Result<T, MpiError>;

impl From<CollError> for MpiError {
    fn from(e: CollError) -> MpiError {
        let class = match &e {
            CollError::PeerFailed { .. } => MPIX_ERR_PROC_FAILED,
            CollError::Length { .. } => MPI_ERR_TRUNCATE,
            CollError::Op(_) => MPI_ERR_OP,
            CollError::NoSuchRequest => MPI_ERR_REQUEST,
            CollError::Invalid(_) => MPI_ERR_ARG,
            CollError::Endpoint(_) | CollError::NotApplicable(_) | CollError::Timeout(_) => {
                MPI_ERR_OTHER
            }
        };
        MpiError::new(class, e.to_string())
    }
}

/// Messages kept for `MPI_Error_string`.
const KEPT: usize = 256;
/// Serial numbers fit in the 25 bits above the class (codes stay positive
/// and below MPICH's `MPI_ERR_LASTCODE`, 0x3fffffff).
const SERIALS: u32 = 1 << 23;

/// Recent error messages by serial number.
#[derive(Debug)]
pub struct ErrorLog {
    kept: Vec<Option<(u32, String)>>,
    next: u32,
}

impl Default for ErrorLog {
    fn default() -> Self {
        ErrorLog {
            kept: vec![None; KEPT],
            next: 1,
        }
    }
}

impl ErrorLog {
    /// The code of `e`; its message is kept for a while.
    /// `MPI_ERR_IN_STATUS` is returned as itself: the standard says the
    /// array calls return exactly that, the details being in the statuses.
    pub fn code(&mut self, e: &MpiError) -> c_int {
        if e.class == MPI_ERR_IN_STATUS {
            return MPI_ERR_IN_STATUS;
        }
        let serial = self.next;
        self.next = (self.next + 1) % SERIALS;
        if self.next == 0 {
            self.next = 1;
        }
        self.kept[serial as usize % KEPT] = Some((serial, e.message.clone()));
        (e.class & 0x7f) | (serial << 7) as c_int
    }

    /// The message of `code`: the full one while it is kept, else the
    /// description of its class.
    pub fn string(&self, code: c_int) -> String {
        let class = class_of(code);
        let serial = (code as u32) >> 7;
        let text = class_text(class);
        match &self.kept[serial as usize % KEPT] {
            Some((s, m)) if serial != 0 && *s == serial => format!("{text}: {m}"),
            _ => text.to_string(),
        }
    }
}

/// The class of an error code.
pub fn class_of(code: c_int) -> c_int {
    code & 0x7f
}

/// The description of an error class.
pub fn class_text(class: c_int) -> &'static str {
    match class {
        MPI_SUCCESS => "MPI_SUCCESS: no error",
        MPI_ERR_BUFFER => "MPI_ERR_BUFFER: invalid buffer pointer",
        MPI_ERR_COUNT => "MPI_ERR_COUNT: invalid count argument",
        MPI_ERR_TYPE => "MPI_ERR_TYPE: invalid datatype",
        MPI_ERR_TAG => "MPI_ERR_TAG: invalid tag",
        MPI_ERR_COMM => "MPI_ERR_COMM: invalid communicator",
        MPI_ERR_RANK => "MPI_ERR_RANK: invalid rank",
        MPI_ERR_ROOT => "MPI_ERR_ROOT: invalid root",
        MPI_ERR_GROUP => "MPI_ERR_GROUP: invalid group",
        MPI_ERR_OP => "MPI_ERR_OP: invalid reduction operation",
        MPI_ERR_ARG => "MPI_ERR_ARG: invalid argument",
        MPI_ERR_UNKNOWN => "MPI_ERR_UNKNOWN: unknown error",
        MPI_ERR_TRUNCATE => "MPI_ERR_TRUNCATE: message truncated",
        MPI_ERR_OTHER => "MPI_ERR_OTHER: other error",
        MPI_ERR_INTERN => "MPI_ERR_INTERN: internal error",
        MPI_ERR_IN_STATUS => "MPI_ERR_IN_STATUS: error code is in the status",
        MPI_ERR_PENDING => "MPI_ERR_PENDING: request pending",
        MPI_ERR_REQUEST => "MPI_ERR_REQUEST: invalid request",
        MPI_ERR_NO_MEM => "MPI_ERR_NO_MEM: out of memory",
        MPI_ERR_UNSUPPORTED_OPERATION => "MPI_ERR_UNSUPPORTED_OPERATION: unsupported operation",
        MPIX_ERR_PROC_FAILED => "MPIX_ERR_PROC_FAILED: a process failed",
        _ => "unknown error class",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_carry_the_class_and_while_recent_the_message() {
        let mut log = ErrorLog::default();
        let e = MpiError::new(MPI_ERR_RANK, "MPI_Send: rank 9 of a communicator of 4");
        let code = log.code(&e);
        assert!(code > 0 && code <= 0x3fff_ffff);
        assert_eq!(class_of(code), MPI_ERR_RANK);
        assert_eq!(
            log.string(code),
            "MPI_ERR_RANK: invalid rank: MPI_Send: rank 9 of a communicator of 4"
        );
        // Once its slot is reused the message is gone; the class stays.
        for _ in 0..KEPT {
            log.code(&MpiError::new(MPI_ERR_TAG, "other"));
        }
        assert_eq!(log.string(code), "MPI_ERR_RANK: invalid rank");
        assert_eq!(log.string(MPI_ERR_COUNT), class_text(MPI_ERR_COUNT));
    }
}
