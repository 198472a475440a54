//! A restarted agent resumes its games from its state directory, secrets included.
//!
//! X's agent commits a rock-paper-scissors choice and stops; O commits while X is away, so
//! the game waits for X's reveal. A new `pipehub mcp` for X, started on the same state
//! directory, finds its seat, recomputes the nonce of its commit from the seat key (it was
//! never stored), reveals by itself, and both seats see the round decided. Driven by the
//! official MCP Python SDK (see `mcp_support`).

mod mcp_support;

use std::time::Duration;

use mcp_support::drive;
use pipehub_tests::Hub;

#[test]
fn a_restarted_agent_reveals_its_commit_and_finishes_the_game() {
    let hub = Hub::start(&[]);
    let work = tempfile::tempdir().expect("a temporary directory");
    let (x, o) = (work.path().join("agent-x"), work.path().join("agent-o"));
    let run = drive(
        "resume",
        &hub.base,
        &[&x, &o],
        work.path(),
        Duration::from_secs(240),
    );
    let s = &run.summary;
    // While X's agent was away, O had committed and the round waited for X's reveal.
    assert_eq!(
        s["whileStopped"]["view"]["phase"], "reveal",
        "{}",
        s["whileStopped"]
    );
    assert_eq!(s["whileStopped"]["view"]["toMove"], "X");
    for seat in ["X", "O"] {
        let state = &s[seat];
        assert_eq!(state["result"]["status"], "win", "{seat}: {state}");
        assert_eq!(state["result"]["winner"], "X", "paper beats rock");
        assert_eq!(state["view"]["history"][0]["X"], "paper");
        assert_eq!(state["view"]["history"][0]["O"], "rock");
    }
}
