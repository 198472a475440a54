//! The actor's messages for running as one node of a cluster (see [`crate::cluster`]).
//!
//! A node that becomes a shard's owner retires the shard's resident actors so that each is
//! rebuilt from the store: the rebuild records the verdicts the old owner never recorded
//! and writes whatever the hub owes, now that this node may write. And when another node
//! hands over an intent for a game (its registration changed there), the owner kicks the
//! game's actor to write what it owes.
//!
//! What it deliberately does not do: decide who owns what (the cluster's leases do) or
//! read Redis itself.

use std::time::Instant;

use actix::prelude::*;

use super::GameActor;

/// Leave the directory and stop now; the next ask starts a fresh actor that rebuilds.
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Retire;

impl Handler<Retire> for GameActor {
    type Result = ();

    fn handle(&mut self, _msg: Retire, ctx: &mut Self::Context) {
        // A held choice lives only in this actor: keep it rather than lose it.
        if self.held.contains(&true) {
            return;
        }
        self.engine.forget(&self.inbox, &self.game, &ctx.address());
        ctx.stop();
    }
}

/// Look again at what the hub owes the game (its registration was refreshed).
#[derive(Clone, Debug, Message)]
#[rtype(result = "()")]
pub struct Kick;

impl Handler<Kick> for GameActor {
    type Result = ();

    fn handle(&mut self, _msg: Kick, ctx: &mut Self::Context) {
        self.last_active = Instant::now();
        self.write_failures = 0;
        self.write_owed(ctx);
    }
}
