//! `pipehub protocol` (being written)

/// Arguments of `pipehub protocol`.
#[derive(Debug, clap::Args)]
pub struct Args {}

pub fn run(_args: Args) -> anyhow::Result<i32> {
    Ok(2)
}
