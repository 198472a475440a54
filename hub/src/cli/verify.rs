//! `pipehub verify [--inbox] [--default-protocol REF] [--json] FILE|-`: verifies every
//! game of a JSON Lines log with the same verifier the hub uses, and prints one line per
//! game (and per line that is not an event) in the exact format of DESIGN.md section 5.
//!
//! Exit codes: 0 when no game and no line is invalid, 1 when one is, 2 when the input
//! cannot be read or the command line is wrong (an unknown `--default-protocol`). Skipped
//! games (a protocol this build does not know) do not make the exit code 1: silence about
//! a game is not a verdict against it.
//!
//! The log is streamed line by line; only per-game state is held, not the events, and a
//! line is never held beyond the size limit (the rest of an over-long line is skipped: it
//! is `too_large` whatever it holds), so no input can make the command grow without bound
//! except by the number of games it names; a game that is over keeps only its result.
//!
//! A game whose first well-formed start names a protocol this build does not know is
//! `skipped` for good, even if a later start of the same id names a known protocol: a
//! reader that knows the first protocol would call that later start `two_genesis`, and
//! this reader must not verify a different game under the same id (see `games::verify`).

use anyhow::Context;
use games::report::{EntryVerdict, LogVerifier, Mode};
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
    let verifier = match read(&args.file, &registry, mode) {
        Ok(verifier) => verifier,
        Err(err) => {
            eprintln!("pipehub verify: {}", super::error_text(&err));
            return Ok(2);
        }
    };
    if verifier.is_empty() {
        // Exit 0 all the same (no game is invalid), but a script whose input was never
        // connected (a closed standard input reads as an empty one) should hear of it.
        eprintln!(
            "pipehub verify: warning: {} holds no events",
            input_name(&args.file)
        );
    }
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    let mut invalid = false;
    for entry in verifier.entries() {
        invalid |= entry.verdict == EntryVerdict::Invalid;
        let line = if args.json {
            entry.to_json()
        } else {
            entry.to_plain()
        };
        writeln!(out, "{line}").context("cannot write the report")?;
    }
    out.flush().context("cannot write the report")?;
    Ok(if invalid { 1 } else { 0 })
}

/// Reads the whole input into a verifier, which then holds each game's state (not its
/// events) and each refused line's number and reason.
fn read<'r>(file: &PathBuf, registry: &'r Registry, mode: Mode) -> anyhow::Result<LogVerifier<'r>> {
    let name = input_name(file);
    let input: Box<dyn Read> = if file.as_os_str() == "-" {
        Box::new(std::io::stdin().lock())
    } else {
        Box::new(std::fs::File::open(file).with_context(|| format!("cannot read {name}"))?)
    };
    let mut reader = BufReader::with_capacity(1 << 16, input);
    let mut verifier = LogVerifier::new(registry, mode);
    let mut line = Vec::with_capacity(LINE_CAP);
    while read_line_capped(&mut reader, &mut line).with_context(|| format!("cannot read {name}"))? {
        verifier.push_line(&line);
    }
    Ok(verifier)
}

/// The input as messages name it.
fn input_name(file: &std::path::Path) -> String {
    if file.as_os_str() == "-" {
        "standard input".into()
    } else {
        file.display().to_string()
    }
}

/// The most of one line kept: past the limit a line is `too_large` whatever follows, and
/// two bytes more leave room for a `\r\n` that is not counted against the limit.
const LINE_CAP: usize = games::json::MAX_BYTES + 2;

/// Reads the next line into `line`, keeping at most [`LINE_CAP`] bytes of it; false at
/// the end of the input.
fn read_line_capped(reader: &mut impl BufRead, line: &mut Vec<u8>) -> std::io::Result<bool> {
    line.clear();
    let mut any = false;
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(any);
        }
        any = true;
        let (len, done) = match buf.iter().position(|&b| b == b'\n') {
            Some(i) => (i + 1, true),
            None => (buf.len(), false),
        };
        let room = LINE_CAP.saturating_sub(line.len());
        line.extend_from_slice(&buf[..len.min(room)]);
        reader.consume(len);
        if done {
            return Ok(true);
        }
    }
}
