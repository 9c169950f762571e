//! Why a DSA connection ended, as a type: what its operations are failed
//! with, whether it was a bad response, and whether it takes the DSA down.

use crate::proto::wire::frame::FrameError;
use std::fmt;
use std::time::Duration;

#[derive(Debug)]
pub(crate) enum Fault {
    /// The DSA sent what is not LDAP.
    Garbage(FrameError),
    /// The DSA answered a message ID the router never sent.
    NeverSent,
    /// An unsolicited notification (a Notice of Disconnection): the DSA is
    /// closing the connection.
    UnsolicitedNotification,
    /// A response over `--max-response-pdu` (of this many bytes).
    TooLarge(usize),
    /// Part of a PDU waited longer than this with no byte more.
    Stalled(Duration),
    /// It waited among the spares, unused, for
    /// [`IDLE`](super::spare::IDLE).
    IdleSpare,
    /// The router closed it.
    Closed,
    /// Its DSA went down and what ran on it has ended.
    Retired,
    /// The DSA closed it.
    HungUp,
    /// Reading from it failed.
    Read(std::io::Error),
}

impl Fault {
    /// A response that was not one to accept (the connection is closed).
    pub(crate) fn bad_response(&self) -> bool {
        matches!(
            self,
            Fault::Garbage(_)
                | Fault::NeverSent
                | Fault::UnsolicitedNotification
                | Fault::TooLarge(_)
        )
    }

    /// Why its DSA is down at once (not after the probes), when the fault
    /// says the DSA is broken, not slow: what it sends is not LDAP, or it
    /// stalls in the middle of a PDU. A response over the router's own
    /// limit, a closed or reset connection, a Notice of Disconnection do
    /// not (a DSA that is really gone refuses the reconnect, which does
    /// mark it down).
    pub(crate) fn takes_the_dsa_down(&self) -> Option<String> {
        match self {
            Fault::Garbage(_) | Fault::NeverSent => {
                Some(format!("sent a malformed response ({self})"))
            }
            Fault::Stalled(_) => Some(self.to_string()),
            _ => None,
        }
    }
}

impl From<FrameError> for Fault {
    fn from(e: FrameError) -> Fault {
        match e {
            FrameError::TooLarge(n) => Fault::TooLarge(n),
            e => Fault::Garbage(e),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Garbage(e) => e.fmt(f),
            Fault::NeverSent => f.write_str("DSA answered a message ID the router never sent"),
            Fault::UnsolicitedNotification => f.write_str("DSA sent an unsolicited notification"),
            Fault::TooLarge(n) => FrameError::TooLarge(*n).fmt(f),
            Fault::Stalled(d) => write!(
                f,
                "stalled in the middle of a response for over {} s",
                d.as_secs_f32()
            ),
            Fault::IdleSpare => f.write_str("an unused spare"),
            Fault::Closed => f.write_str("closed by the router"),
            Fault::Retired => f.write_str("retired: its DSA went down"),
            Fault::HungUp => f.write_str("closed by the DSA"),
            Fault::Read(e) => write!(f, "read error: {e}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What each fault says (its operations' errors and the DSA's reason
    /// quote it) and whether it takes the DSA down.
    #[test]
    fn faults_say_why_and_only_broken_dsas_go_down() {
        let rows: [(Fault, &str, bool); 6] = [
            (
                Fault::Garbage(FrameError::NotSequence(0x04)),
                "PDU starts with tag 0x04, not a SEQUENCE",
                true,
            ),
            (
                Fault::NeverSent,
                "DSA answered a message ID the router never sent",
                true,
            ),
            (
                Fault::UnsolicitedNotification,
                "DSA sent an unsolicited notification",
                false,
            ),
            (
                FrameError::TooLarge(9000).into(),
                "PDU of 9000 bytes exceeds the limit",
                false,
            ),
            (
                Fault::Stalled(Duration::from_millis(1500)),
                "stalled in the middle of a response for over 1.5 s",
                true,
            ),
            (Fault::HungUp, "closed by the DSA", false),
        ];
        for (fault, says, down) in rows {
            assert_eq!(fault.to_string(), says);
            assert_eq!(fault.takes_the_dsa_down().is_some(), down, "{says}");
        }
        assert!(Fault::from(FrameError::BadLength).bad_response());
        assert!(!Fault::Closed.bad_response());
    }
}
