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
//! have the owner act for a game it does not own (O paired here, so the hub owes the start)
//! hands the intent to the owner through the shard's intent stream (`ph:x:{shard}`); the
//! owner re-reads the game's registration and lets its actor write what is owed.
//!
//! What it deliberately does not do: move shards for load (only for liveness and fair
//! share), or forward a client's request to the owner: a hub-held seat's move is drafted by
//! whichever node received it from that node's (followed) head, and a racing or stale
//! draft is settled by the chain like any other racing writer (`stale_seq`).

pub mod lease;
pub mod limits;

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
}

/// A shared handle, as the engine holds it.
pub type SharedOwnership = Arc<dyn Ownership>;
