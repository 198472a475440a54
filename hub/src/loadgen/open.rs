//! The games a run holds open on the hub, and ending them once the run is over.
//!
//! A seated game stays open until it ends, and a game its seats stop playing ends only by
//! a resign (DESIGN.md section 2: silence is never a concession). Open games count against
//! the hub's cap per person (`--max-open-games`), which for the load generator is its
//! address, so games a run left open would be held against its next run and against every
//! other client on the same host, for good. So each table notes every game it seats and
//! crosses it off when it sees the game end; what is left once the run is over (each
//! table's last game, kept open for the final memory read, and any game whose sockets
//! broke) is resigned over HTTP with X's token. The resigns are bounded in number at once
//! (by the HTTP client) and in time as a whole: a game that could not be resigned in time
//! is counted and reported, not waited for.

use super::http::{HubClient, Seated};
use futures_util::StreamExt;
use parking_lot::Mutex;
use std::collections::HashMap;
use std::time::Duration;

/// Games seated by this run and not seen to end, by game id, each with X's token.
#[derive(Debug, Default)]
pub struct OpenGames {
    games: Mutex<HashMap<String, String>>,
}

impl OpenGames {
    /// Notes a game a table has just seated.
    pub fn seated(&self, seated: &Seated) {
        self.games
            .lock()
            .insert(seated.game.clone(), seated.token_x.clone());
    }

    /// Crosses off a game that ended.
    pub fn ended(&self, game: &str) {
        self.games.lock().remove(game);
    }

    /// Games still open.
    pub fn len(&self) -> usize {
        self.games.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Resigns every game still open, for at most `within`. What it says is kept apart
    /// from the run's errors, which count what happened while the clock ran.
    pub async fn resign_all(&self, http: &HubClient, inbox: &str, within: Duration) -> Left {
        let games: Vec<(String, String)> = self
            .games
            .lock()
            .iter()
            .map(|(game, token)| (game.clone(), token.clone()))
            .collect();
        let failure = Mutex::new(None);
        let first_failure = &failure;
        // The client caps the requests in flight; this caps the futures waiting for it.
        let resigns = futures_util::stream::iter(games)
            .map(|(game, token)| async move {
                match http.resign(inbox, &game, &token).await {
                    Ok(()) => self.ended(&game),
                    Err(e) => {
                        first_failure.lock().get_or_insert_with(|| e.to_string());
                    }
                }
            })
            .buffer_unordered(super::http::MAX_IN_FLIGHT)
            .for_each(|()| async {});
        let in_time = tokio::time::timeout(within, resigns).await.is_ok();
        let first_failure = failure.into_inner().or_else(|| {
            (!in_time).then(|| format!("not all answered within {:.1} s", within.as_secs_f64()))
        });
        Left {
            games: self.len(),
            first_failure,
        }
    }
}

/// The games still open after [`OpenGames::resign_all`], and why the first of them is.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Left {
    pub games: usize,
    pub first_failure: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seated(game: &str) -> Seated {
        Seated {
            game: game.into(),
            token_x: format!("x-{game}"),
            token_o: format!("o-{game}"),
        }
    }

    #[test]
    fn a_game_is_open_from_its_seating_to_its_end() {
        let open = OpenGames::default();
        open.seated(&seated("a"));
        open.seated(&seated("b"));
        open.ended("a");
        open.ended("never-seated");
        assert_eq!(open.len(), 1);
        open.ended("b");
        assert!(open.is_empty());
    }

    /// A hub that does not answer: every game stays counted as open, and the attempt
    /// ends in about the time it was given.
    #[tokio::test]
    async fn games_a_silent_hub_cannot_resign_are_left_counted() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bound");
        let addr = listener.local_addr().expect("an address");
        // Accepts and never answers, holding the connections.
        let silent = tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((tcp, _)) = listener.accept().await {
                held.push(tcp);
            }
        });
        let http = HubClient::new(&format!("http://{addr}")).expect("a URL");
        let open = OpenGames::default();
        for game in ["a", "b", "c"] {
            open.seated(&seated(game));
        }
        let started = tokio::time::Instant::now();
        let left = open
            .resign_all(&http, "inbox", Duration::from_millis(300))
            .await;
        assert_eq!(left.games, 3);
        assert!(left.first_failure.is_some_and(|f| f.contains("within")));
        assert!(started.elapsed() < Duration::from_secs(3), "bounded");
        silent.abort();
    }
}
