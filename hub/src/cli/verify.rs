//! `pipehub verify [--inbox] [--default-protocol REF] [--json] FILE|-`: verifies every
//! game of a JSON Lines log with the same verifier the hub uses, and prints one line per
//! game (and per line that is not an event) in the exact format of DESIGN.md section 5.
//!
//! Exit codes: 0 when no game and no line is invalid, 1 when one is, 2 when the input
//! cannot be read or the command line is wrong (an unknown `--default-protocol`). Skipped
//! games (a protocol this build does not know) do not make the exit code 1: silence about
//! a game is not a verdict against it.
//!
//! The log is streamed line by line; only per-game state is held, not the events.

use anyhow::Context;
use games::report::{any_invalid, LogVerifier, Mode};
use games::Registry;
use std::io::{BufRead, BufReader, Read, Write};
use std::path::PathBuf;

/// Arguments of `pipehub verify`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// Read a raw capture dump: rejected events are listed and each game goes on from its
    /// last accepted event (default: strict, every event must be accepted).
    #[arg(long)]
    pub inbox: bool,
    /// The protocol of a start that names none (default: pipehub:tic-tac-toe).
    #[arg(long, value_name = "REF")]
    pub default_protocol: Option<String>,
    /// One JSON object per game instead of plain lines.
    #[arg(long)]
    pub json: bool,
    /// The log to read; `-` for standard input.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    let mut registry = Registry::builtin();
    if let Some(r) = &args.default_protocol {
        match registry.with_default(r) {
            Some(with) => registry = with,
            None => {
                eprintln!("pipehub verify: unknown protocol {r:?} for --default-protocol");
                return Ok(2);
            }
        }
    }
    let mode = if args.inbox {
        Mode::Inbox
    } else {
        Mode::Strict
    };
    let entries = match read(&args.file, &registry, mode) {
        Ok(entries) => entries,
        Err(err) => {
            eprintln!("pipehub verify: {err:#}");
            return Ok(2);
        }
    };
    let mut out = std::io::stdout().lock();
    for entry in &entries {
        let line = if args.json {
            entry.to_json()
        } else {
            entry.to_plain()
        };
        writeln!(out, "{line}").context("cannot write the report")?;
    }
    out.flush().context("cannot write the report")?;
    Ok(if any_invalid(&entries) { 1 } else { 0 })
}

fn read(
    file: &PathBuf,
    registry: &Registry,
    mode: Mode,
) -> anyhow::Result<Vec<games::report::Entry>> {
    let name = file.display();
    let input: Box<dyn Read> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).with_context(|| format!("cannot read {name}"))?)
    };
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut verifier = LogVerifier::new(registry, mode);
    let mut line = Vec::with_capacity(4096);
    loop {
        line.clear();
        let n = reader
            .read_until(b'\n', &mut line)
            .with_context(|| format!("cannot read {name}"))?;
        if n == 0 {
            break;
        }
        verifier.push_line(&line);
    }
    Ok(verifier.finish())
}
