//! Redis key names, all under `ph:` so a Redis can be shared with other applications.
//!
//! Per shard: its stream (`ph:s:`), the counter its positions come from (`ph:seq:`), its
//! verdicts as a hash (`ph:v:`) and as a stream (`ph:vs:`), its lease and fence, and the
//! intents of hub-held writes handed to its owner (`ph:x:`). Per inbox: its captures
//! (`ph:i:`) and its games (`ph:gl:`); per game, its positions (`ph:g:`). The names the
//! inbox shares with the cluster and the tests are spelled here once.
//!
//! What it deliberately does not do: read or write anything. The scripts that write
//! several of these keys at once are in `scripts`.

pub const SHARDS: &str = "ph:shards";
pub fn stream(shard: u32) -> String {
    format!("ph:s:{shard}")
}
pub fn seq(shard: u32) -> String {
    format!("ph:seq:{shard}")
}
pub fn verdicts(shard: u32) -> String {
    format!("ph:v:{shard}")
}
pub fn verdict_stream(shard: u32) -> String {
    format!("ph:vs:{shard}")
}
pub fn lease(shard: u32) -> String {
    format!("ph:lease:{shard}")
}
pub fn fence(shard: u32) -> String {
    format!("ph:fence:{shard}")
}
pub fn intents(shard: u32) -> String {
    format!("ph:x:{shard}")
}
/// The game's index; the inbox's length keeps `a|b` + `c` apart from `a` + `b|c`.
pub fn game(inbox: &str, game: &str) -> String {
    format!("ph:g:{}:{inbox}|{game}", inbox.len())
}
pub fn inbox(inbox: &str) -> String {
    format!("ph:i:{inbox}")
}
pub fn game_list(inbox: &str) -> String {
    format!("ph:gl:{inbox}")
}

#[cfg(test)]
mod tests {
    use super::super::keys;

    #[test]
    fn game_keys_keep_inbox_and_game_apart() {
        assert_ne!(keys::game("a|b", "c"), keys::game("a", "b|c"));
    }
}
