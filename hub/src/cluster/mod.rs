//! Several hub nodes on one Redis, acting as one hub (DESIGN.md section 6).
//!
//! Every node appends to the shared inbox, but each shard has exactly one adjudicator: the
//! node holding its **lease** (`ph:lease:{shard}`, value `node:fence`), taken with a fence
//! number that grows with every new owner, renewed by its owner every [`RENEW_EVERY`], and
//! lost after [`LEASE_TTL`] without renewal. Only the owner's consumer reads the shard and
//! only its game actors run the referee on the shard's records; it records their verdicts
//! (the verdict hash and stream, fenced inside Redis so that an owner that paused past its
//! lease writes nothing after its successor took over, see [`crate::inbox::redis`]), writes
//! the events the hub owes (starts, hub-held moves, custodial commits and reveals, holding
//! rock-paper-scissors choices until their turn), and publishes each accepted event's
//! per-seat views once, to its own rooms and to the other nodes' ([`relay`]). Live nodes
//! announce themselves in `ph:nodes`, and each node holds at most its fair share of shards,
//! so three nodes split eight shards 3/3/2, and when one dies its shards move to the
//! survivors within about [`LEASE_TTL`] + one round.
//!
//! A node that does not own a game's shard serves it all the same:
//! - a whole signed event posted there is appended (the inbox sequences it) and answered
//!   with the owner's verdict, read from the shard's verdict stream ([`verdicts`]): up to
//!   5 s, then 202 `pending`;
//! - a hub-held seat's move, resign or rock-paper-scissors choice, and a pairing that owes
//!   the game its start, go to the owner through the shard's intent stream (`ph:x:{shard}`,
//!   [`writes`]), and the node waits for the verdict as above;
//! - reads (state, seat views, export, WebSocket `hello` and `game.board`) come from a
//!   *copy* of the game: an actor that never judges a record on its own but rebuilds the
//!   game from its per-game index up to the last recorded verdict, and catches up from
//!   where it stopped on each read (see the actor's `cluster` module);
//! - its WebSocket clients get the owner's publications through Redis pub/sub.
//!
//! A new owner takes a shard over in its consumer: it retires its resident copies of the
//! shard's games and resumes a margin before the last position the shard's verdict stream
//! covers, so the games with captures left without a verdict are rebuilt, recorded, and
//! owed writes written, however far behind the old owner was.
//!
//! What it deliberately does not do: move shards for load (only for liveness and fair
//! share), keep a rock-paper-scissors choice held by an owner that dies (the seat is told
//! `held_choice_lost` and chooses again), or trim the shard streams (a game's history is
//! its chain; verdict and intent streams are capped).

pub mod lease;
pub mod limits;
pub mod relay;
pub mod verdicts;
pub mod writes;

use std::sync::Arc;

use async_trait::async_trait;

pub use lease::{RedisCluster, LEASE_TTL, RENEW_EVERY};

/// What the engine asks of the cluster. `None` in [`crate::game::HubConfig`] means a
/// single hub that owns every shard.
#[async_trait]
pub trait Ownership: Send + Sync {
    /// True while this node holds `shard`'s lease and its consumer has taken the shard
    /// over: this node adjudicates the shard's games.
    fn owns(&self, shard: u32) -> bool;

    /// True while this node holds `shard`'s lease, taken over yet or not.
    fn leased(&self, shard: u32) -> bool;

    /// False while this node's last lease round failed: the shared store answers, but took
    /// no write (a Redis out of memory or read-only), which a broken connection alone
    /// would not show.
    fn rounds_succeed(&self) -> bool {
        true
    }

    /// This node's consumer takes `shard` over: from now on [`Ownership::owns`] is true
    /// while the lease lasts.
    fn adjudicate(&self, shard: u32);

    /// The value of the lease under which this node adjudicates `shard` (`node:fence`,
    /// new with every take-over), or `None` when it does not.
    fn adjudicating_under(&self, shard: u32) -> Option<String>;

    /// Asks `shard`'s owner to look at `inbox|game` again: its registration changed here
    /// and the hub may owe the game an event.
    async fn hand_over(&self, shard: u32, inbox: &str, game: &str);

    /// Hands a hub-held seat's move, resign or rock-paper-scissors choice to `shard`'s
    /// owner, which drafts it from its head and appends it (or holds the choice).
    async fn forward_write(
        &self,
        shard: u32,
        target: (&str, &str, games::Seat),
        what: Forward<'_>,
        wait: std::time::Duration,
    ) -> Result<Forwarded, crate::game::HubError>;

    /// The last shard position the shard's verdict stream records a verdict for (0 when
    /// none): where a new owner's consumer resumes, less a margin.
    async fn covered(&self, shard: u32) -> Result<u64, crate::inbox::StoreError>;

    /// Bumped whenever this node sees a verdict of `shard` recorded (by whichever node
    /// owns it), so a reader can wait for the owner instead of polling.
    fn verdicts_seen(&self, shard: u32) -> Option<tokio::sync::watch::Receiver<u64>>;
}

/// What a non-owner hands to the owner to write for a hub-held seat.
#[derive(Clone, Copy, Debug)]
pub enum Forward<'a> {
    /// A move (`None`: a resign), drafted from the owner's head.
    Move(Option<&'a serde_json::Value>),
    /// A rock-paper-scissors choice, committed now or held by the owner for its turn.
    Choice(&'a str),
}

/// What the owner did with a forwarded write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Forwarded {
    /// Appended: its capture and hash.
    Appended(crate::inbox::Capture, String),
    /// A choice the owner holds until the seat's commit turn.
    Held,
}

/// A shared handle, as the engine holds it.
pub type SharedOwnership = Arc<dyn Ownership>;
