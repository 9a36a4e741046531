//! The parent's side of a child process: starts it with its environment,
//! relays what it reports (measurements into the file, progress, notices,
//! NCCL's own lines), stops it at its deadline, and says why it failed.

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::time::{Duration, Instant};

use crate::units::Time;

use super::output::MeasurementsFile;
use super::progress::Progress;
use super::protocol::{CHILD_SUBCOMMAND, ChildMessage, ChildSpec, decode};
use super::settings::ChildEnvironment;

/// Runs one child and relays what it reports; returns how many points it
/// measured, and why it failed if it did.
pub fn run_child_process(
    spec: &ChildSpec,
    environment: &ChildEnvironment,
    timeout: Time,
    progress: &Progress,
    file: &mut MeasurementsFile,
) -> (usize, Result<(), String>) {
    let executable = match std::env::current_exe() {
        Ok(path) => path,
        Err(error) => return (0, Err(format!("cannot find this program to re-run it: {error}"))),
    };
    let mut command = Command::new(executable);
    command
        .args(["calibrate", CHILD_SUBCOMMAND, "--spec", &serde_json::to_string(spec).expect("plain data")])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for name in &environment.remove {
        command.env_remove(name);
    }
    for (name, value) in &environment.set {
        command.env(name, value);
    }
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(error) => return (0, Err(format!("cannot start a measuring process: {error}"))),
    };
    let (Some(stdout), Some(mut stderr)) = (child.stdout.take(), child.stderr.take()) else {
        return (0, Err("the measuring process has no output pipes".into()));
    };
    let (lines, received) = mpsc::channel::<String>();
    let stdout_reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if lines.send(line).is_err() {
                break;
            }
        }
    });
    let stderr_reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = stderr.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    });

    let deadline = Instant::now() + Duration::from_secs_f64(timeout.as_secs());
    let mut measured = 0;
    let mut problem = None;
    loop {
        match received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(line) => {
                let decoded = decode(&line);
                if !decoded.text.trim().is_empty() {
                    progress.forward(&decoded.text);
                }
                match decoded.message {
                    None => {}
                    Some(Ok(ChildMessage::Started { label })) => progress.start(&label),
                    Some(Ok(ChildMessage::Notice { text })) => progress.notice(&text),
                    Some(Ok(ChildMessage::Measured { measurement })) => {
                        if let Err(error) = file.append(&[*measurement]) {
                            problem.get_or_insert(error.to_string());
                        }
                        measured += 1;
                        progress.advance(1);
                    }
                    Some(Err(error)) => progress.warning(&error),
                }
            }
            Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                // Stops only the process this function started.
                let _ = child.kill();
                problem.get_or_insert(format!(
                    "did not finish within {timeout} and was stopped; raise --child-timeout or measure fewer sizes"
                ));
                break;
            }
        }
    }
    let status = child.wait();
    let _ = stdout_reader.join();
    let errors = stderr_reader.join().unwrap_or_default();
    if let Some(problem) = problem {
        return (measured, Err(problem));
    }
    match status {
        Ok(status) if status.success() => (measured, Ok(())),
        Ok(status) => (measured, Err(format!("the measuring process {}: {}", exit_description(status), last_error(&errors)))),
        Err(error) => (measured, Err(format!("cannot wait for the measuring process: {error}"))),
    }
}

fn exit_description(status: std::process::ExitStatus) -> String {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return format!("was killed by signal {signal}");
        }
    }
    format!("exited with {status}")
}

/// The child's own error line, else the last thing it said.
fn last_error(stderr: &str) -> String {
    let lines: Vec<&str> = stderr.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    match lines.iter().rev().find_map(|l| l.strip_prefix("error: ")) {
        Some(error) => error.to_string(),
        None => lines.last().map_or_else(|| "it said nothing on standard error".to_string(), |l| l.to_string()),
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_error_line_of_a_child_is_its_reason() {
        assert_eq!(last_error("NCCL WARN x\nerror: ncclAllReduce failed\n"), "ncclAllReduce failed");
        assert_eq!(last_error("thread panicked\n\n"), "thread panicked");
        assert_eq!(last_error(""), "it said nothing on standard error");
    }
}
