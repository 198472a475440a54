//! Log lines captured in memory, for tests that check what the hub writes to its log.

use std::sync::{Arc, Mutex};

/// A log writer that keeps every byte; clones share one buffer.
#[derive(Clone, Default)]
pub struct Lines(Arc<Mutex<Vec<u8>>>);

impl Lines {
    /// A writer for `tracing_subscriber`'s `with_writer`, into these lines.
    pub fn writer(&self) -> impl Fn() -> Lines + Send + Sync + 'static {
        let lines = self.clone();
        move || lines.clone()
    }

    /// Everything written so far.
    pub fn text(&self) -> String {
        let bytes = self.0.lock().expect("not poisoned").clone();
        String::from_utf8(bytes).expect("utf-8")
    }
}

impl std::io::Write for Lines {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().expect("not poisoned").extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}
