//! The commands of `pipehub`, one module each. Each exposes its clap arguments and a `run`
//! that returns the process exit code.

pub mod loadgen;
pub mod mcp;
pub mod protocol;
pub mod serve;
pub mod verify;

/// An error as the command line prints it: each cause after its context, but a cause that
/// the text so far already ends with is not spelled again. Many of the hub's errors put
/// their source in their own message too (`store i/o: {0}`, so that a log line of the
/// error alone says why), which `{:#}` would print once for every layer.
pub fn error_text(err: &anyhow::Error) -> String {
    crate::client::causes(err.as_ref())
}

/// A command's arguments as a whole command line, for tests that parse flags.
#[cfg(test)]
#[derive(Debug, clap::Parser)]
pub(crate) struct Parsed<A: clap::Args> {
    #[command(flatten)]
    pub args: A,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inbox::StoreError;
    use crate::serve::ServeError;
    use anyhow::Context;

    #[test]
    fn an_error_names_each_cause_once() {
        let full = std::io::Error::from(std::io::ErrorKind::StorageFull);
        let err = Err::<(), _>(ServeError::Store(StoreError::Io(full)))
            .context("the hub stopped with an error")
            .expect_err("an error");
        let io = std::io::Error::from(std::io::ErrorKind::StorageFull).to_string();
        assert_eq!(
            error_text(&err),
            format!("the hub stopped with an error: store: store i/o: {io}")
        );
        // Causes that do not repeat themselves are all kept.
        let err = Err::<(), _>(std::io::Error::other("disk gone"))
            .context("reading data/LOCK")
            .context("opening the store")
            .expect_err("an error");
        assert_eq!(
            error_text(&err),
            "opening the store: reading data/LOCK: disk gone"
        );
    }
}
