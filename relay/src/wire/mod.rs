//! The relay's wire messages, one module per direction, as in DESIGN.md section 5.
//!
//! [`client_in`] parses what a client may send (`hello`, `game.move`, `game.resign`,
//! `game.board`, `game.subscribe`) and refuses anything else with a wire error;
//! [`client_out`] writes what the hub sends (`hello.ok`, `game.state`, `game.refused`,
//! `error`). Each message owns its (de)serialization here and nowhere else, so the session
//! logic never touches JSON text.

pub mod client_in;
pub mod client_out;
