//! `pipehub protocol`: protocol ids.
//!
//! `protocol hash FILE` prints the protocol id of any JSON object, exactly as the Aigenora
//! reference's `aigenora protocol hash FILE` does, so ids agree across both ecosystems. Like
//! the reference it only warns (on stderr) about an unknown `spec_version`: hashing a spec is
//! not playing it. A file that cannot be read or is not a JSON object is an error naming the
//! file, exit 2. `protocol list` prints the built-in protocols: ref, id and aliases.
//!
//! The hashing itself lives in `games::protocol::spec`; this module only reads the file and
//! prints.

use games::protocol::spec;
use games::Registry;
use std::path::PathBuf;

/// Arguments of `pipehub protocol`.
#[derive(Debug, clap::Args)]
pub struct Args {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Print the protocol id of a spec file (any JSON object).
    Hash {
        /// The spec file, e.g. spec.json.
        file: PathBuf,
    },
    /// Print every built-in protocol: ref, protocol id and aliases.
    List {
        /// One JSON object per protocol: {"ref", "aliases", "id"}.
        #[arg(long)]
        json: bool,
    },
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    match args.command {
        Command::Hash { file } => Ok(hash(&file)),
        Command::List { json } => {
            list(json);
            Ok(0)
        }
    }
}

fn hash(file: &PathBuf) -> i32 {
    let shown = file.display();
    let text = match std::fs::read(file) {
        Ok(bytes) => match String::from_utf8(bytes) {
            Ok(text) => text,
            Err(_) => {
                eprintln!("pipehub: {shown}: not valid JSON: the file is not UTF-8");
                return 2;
            }
        },
        Err(err) => {
            eprintln!("pipehub: cannot read {shown}: {err}");
            return 2;
        }
    };
    match spec::hash_document(&text) {
        Ok(hashed) => {
            if let Some(version) = hashed.unknown_version {
                eprintln!(
                    "pipehub: warning: {shown}: unsupported spec_version {version} (supported: \"{}\", a string)",
                    spec::SPEC_VERSION
                );
            }
            println!("{}", hashed.id);
            0
        }
        Err(err) => {
            eprintln!("pipehub: {shown}: {err}");
            2
        }
    }
}

fn list(json: bool) {
    for protocol in Registry::builtin().iter() {
        let (name, aliases) = match protocol.refs().split_first() {
            Some((name, aliases)) => (*name, aliases),
            None => continue,
        };
        if json {
            let line = serde_json::json!({"ref": name, "aliases": aliases, "id": protocol.id()});
            println!("{line}");
        } else if aliases.is_empty() {
            println!("{name} {}", protocol.id());
        } else {
            println!("{name} {} aliases={}", protocol.id(), aliases.join(","));
        }
    }
}
