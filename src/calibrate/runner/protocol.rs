//! The child protocol: what the parent hands a child process (a
//! specification on its command line) and what the child reports back, one
//! tagged JSON object per line on its standard output. The tag may follow
//! text NCCL printed without a newline (its log goes to the same stream), so
//! it is searched anywhere in a line. Also the child's entry point.

use std::io::Write;

use serde::{Deserialize, Serialize};

use crate::calibrate::schema::Measurement;

use super::collectives::{self, CollectivePoint};
use super::settings::NcclSetting;
use super::{RunnerError, Timing};

/// The hidden `icsim calibrate` subcommand a child process runs.
pub const CHILD_SUBCOMMAND: &str = "collective-child";

/// Starts every line of the child protocol; the number is its version.
pub const CHILD_TAG: &str = "@icsim-child:1 ";

/// What a child reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ChildMessage {
    /// It begins measuring this.
    Started { label: String },
    /// One finished measurement.
    Measured { measurement: Box<Measurement> },
    /// Something the user should know.
    Notice { text: String },
}

/// What the parent hands a child: everything it measures and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildSpec {
    pub setting: NcclSetting,
    /// The `transport` its measurements get ("nvswitch", "auto", "shm").
    pub transport: String,
    /// What to load NCCL from (a path, or a library name).
    pub nccl_library: String,
    /// Use the first `gpus` GPUs, one rank each.
    pub gpus: usize,
    pub points: Vec<CollectivePoint>,
    pub timing: Timing,
    pub system: String,
    pub source: String,
    /// The LLM whose allreduce sequences are among the points (its name
    /// as `--llm` gave it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub llm: Option<String>,
}

pub fn encode(message: &ChildMessage) -> String {
    format!("{CHILD_TAG}{}", serde_json::to_string(message).expect("plain data"))
}

/// One line of a child's standard output.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildLine {
    /// Text that is not the protocol's (NCCL's log), possibly empty.
    pub text: String,
    /// The protocol message on the line, or why it could not be read.
    pub message: Option<Result<ChildMessage, String>>,
}

pub fn decode(line: &str) -> ChildLine {
    match line.find(CHILD_TAG) {
        None => ChildLine { text: line.to_string(), message: None },
        Some(at) => {
            let json = &line[at + CHILD_TAG.len()..];
            let message = serde_json::from_str(json).map_err(|e| format!("unreadable child message {json:?}: {e}"));
            ChildLine { text: line[..at].to_string(), message: Some(message) }
        }
    }
}

/// Runs in the child process: measures the collectives `spec_json` asks for
/// and reports them on standard output.
pub fn run_child(spec_json: &str) -> Result<(), RunnerError> {
    let spec: ChildSpec =
        serde_json::from_str(spec_json).map_err(|e| RunnerError::Child(format!("unreadable child specification: {e}")))?;
    let emit = |message: ChildMessage| {
        // One write of the whole line: pipe writes this short are atomic, so
        // NCCL's log (on the same stream) cannot land inside it.
        let line = encode(&message) + "\n";
        let mut out = std::io::stdout().lock();
        // A parent that went away leaves nobody to tell.
        let _ = out.write_all(line.as_bytes()).and_then(|()| out.flush());
    };
    collectives::run(&spec, &emit)
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::calibrate::runner::settings::TransportSetting;
    use crate::calibrate::runner::tests::timing;
    use crate::collective::{Algorithm, Op};
    use crate::units::Bytes;

    #[test]
    fn child_messages_round_trip_and_survive_nccl_text_before_them() {
        let measurement = Measurement {
            schema: 1,
            system: "x".into(),
            op: "allreduce".into(),
            bytes: 8,
            time_us: 9.5,
            ranks: Some(2),
            ..Measurement::default()
        };
        for message in [
            ChildMessage::Started { label: "allreduce shm 8B".into() },
            ChildMessage::Measured { measurement: Box::new(measurement) },
            ChildMessage::Notice { text: "hello".into() },
        ] {
            let line = encode(&message);
            assert!(!line.contains('\n'));
            assert_eq!(decode(&line), ChildLine { text: String::new(), message: Some(Ok(message.clone())) });
            let glued = format!("host:1:2 [0] NCCL INFO Channel 00/02 {line}");
            let decoded = decode(&glued);
            assert_eq!(decoded.text, "host:1:2 [0] NCCL INFO Channel 00/02 ");
            assert_eq!(decoded.message, Some(Ok(message)));
        }
        assert_eq!(decode("host:1:2 [0] NCCL INFO Bootstrap").message, None);
        assert!(matches!(decode(&format!("{CHILD_TAG}{{\"kind\": \"bogus\"}}")).message, Some(Err(_))));
    }

    #[test]
    fn child_specs_round_trip_through_json() {
        let spec = ChildSpec {
            setting: NcclSetting { transport: TransportSetting::Shm, proto: None, algo: Some(Algorithm::Ring), channels: None },
            transport: "shm".into(),
            nccl_library: "/x/libnccl.so.2".into(),
            gpus: 2,
            points: vec![CollectivePoint::single(Op::ReduceScatter, Bytes::mib(64))],
            timing: timing(),
            system: "box".into(),
            source: "NCCL 2.28.9".into(),
            llm: None,
        };
        let text = serde_json::to_string(&spec).unwrap();
        assert_eq!(serde_json::from_str::<ChildSpec>(&text).unwrap(), spec);
    }
}
