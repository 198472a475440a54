//! Several hub nodes on one Redis, acting as one hub (DESIGN.md section 6).
//!
//! Every node appends to the shared inbox, and every node *follows* every shard: its
//! consumers read each shard stream in order and feed its own game actors, so any node can
//! answer reads, seat views and WebSocket subscribers of any game with its own per-seat
//! views, computed by the same deterministic verifier from the same records in the same
//! order. What only a shard's **owner** does is write: it records the shard's verdicts (the
//! verdict stream) and writes the events the hub owes a game from its actor's head (a
//! hub-written start, custodial reveals). Ownership is a lease in Redis
//! (`ph:lease:{shard}`, value `node:fence`), taken with a fence number that grows with every
//! new owner, renewed by its owner every [`RENEW_EVERY`], and lost after [`LEASE_TTL`]
//! without renewal; verdict writes check the lease value inside Redis, so an owner that
//! paused past its lease writes nothing after its successor took over (see
//! [`crate::inbox::redis`]). Live nodes announce themselves in `ph:nodes`, and each node
//! holds at most its fair share of shards, so three nodes split eight shards 3/3/2, and when
//! one dies its shards move to the survivors within about [`LEASE_TTL`] + one round.
//!
//! A new owner rebuilds the games it takes over: every resident actor of the shard and
//! every game with a recent capture that has no recorded verdict is rebuilt from the store,
//! which records the missing verdicts and writes whatever the hub owes. A node that must
//! have the owner act for a game it does not own hands the intent to the owner through the
//! shard's intent stream (`ph:x:{shard}`): after O paired there, the owner re-reads the
//! game's registration and lets its actor write the start; for a hub-held seat's move or
//! resign, the owner drafts it from its own head and appends it ([`writes`]).
//!
//! What it deliberately does not do: move shards for load (only for liveness and fair
//! share), or forward whole signed events (any node appends those; the inbox sequences
//! them, and the receiving node answers with the verdict its own follower reaches, the
//! one the owner records). A custodial choice held on a non-owner is committed by that node, the only one
//! that knows it.

pub mod lease;
pub mod limits;
pub mod writes;

use std::sync::Arc;

use async_trait::async_trait;

pub use lease::{RedisCluster, LEASE_TTL, RENEW_EVERY};

/// What the engine asks of the cluster. `None` in [`crate::game::HubConfig`] means a
/// single hub that owns every shard.
#[async_trait]
pub trait Ownership: Send + Sync {
    /// True while this node holds `shard`'s lease.
    fn owns(&self, shard: u32) -> bool;

    /// Asks `shard`'s owner to look at `inbox|game` again: its registration changed here
    /// and the hub may owe the game an event.
    async fn hand_over(&self, shard: u32, inbox: &str, game: &str);

    /// Hands a hub-held seat's move (`None`: a resign) to `shard`'s owner, which drafts it
    /// from its head and appends it; the capture and hash of what it appended.
    async fn forward_write(
        &self,
        shard: u32,
        target: (&str, &str, games::Seat),
        mv: Option<&serde_json::Value>,
        wait: std::time::Duration,
    ) -> Result<(crate::inbox::Capture, String), crate::game::HubError>;
}

/// A shared handle, as the engine holds it.
pub type SharedOwnership = Arc<dyn Ownership>;
