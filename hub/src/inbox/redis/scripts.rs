//! The Lua scripts that change several keys at once, so that Redis runs each whole or
//! not at all, whichever node calls it.
//!
//! What it deliberately does not do: hold any other command. Reads, and writes of one key,
//! are plain commands where they are made.

/// Appends one capture: takes the shard's next position from its counter, adds the entry
/// at stream id `0-{pos}`, and indexes it by game, by inbox and, for a game's first capture,
/// in the inbox's game list. KEYS: the counter, the stream, the game, the inbox, its game
/// list; ARGV: inbox, game, seat, raw event, time (ms), shard. Returns the position.
pub(super) const APPEND: &str = r"
local pos = redis.call('INCR', KEYS[1])
redis.call('XADD', KEYS[2], '0-' .. pos, 'i', ARGV[1], 'g', ARGV[2], 's', ARGV[3], 'r', ARGV[4], 't', ARGV[5])
local n = redis.call('RPUSH', KEYS[3], pos)
redis.call('RPUSH', KEYS[4], ARGV[6] .. ':' .. pos)
if n == 1 then redis.call('RPUSH', KEYS[5], ARGV[2]) end
return pos
";

/// Records a verdict, only while the caller's lease value (empty: unfenced) is still the
/// shard's: in the shard's hash, and in its verdict stream (trimmed to about `ARGV[4]`).
/// KEYS: the lease, the verdict hash, the verdict stream; ARGV: lease value, position,
/// verdict, stream length. Returns 1 when recorded, 0 when the lease moved on.
pub(super) const PUT_VERDICT: &str = r"
if ARGV[1] ~= '' and redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('HSET', KEYS[2], ARGV[2], ARGV[3])
redis.call('XADD', KEYS[3], 'MAXLEN', '~', ARGV[4], '*', 'c', ARGV[2], 'v', ARGV[3], 'l', ARGV[1])
return 1
";
