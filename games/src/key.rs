//! `(inbox, game)` as a hash-map key that is looked up without allocating.
//!
//! Maps of games are keyed by `(String, String)`, and the hot path has the two ids as
//! `&str`: building an owned pair for every lookup cost two allocations each time, several
//! times per move. [`GameIds`] is the borrowed form such a map also answers to:
//! `map.get(&(inbox, game) as &dyn GameIds)`. It hashes and compares exactly as the owned
//! pair does (each id as a `str`, inbox first), which is what `Borrow` requires.

use std::borrow::Borrow;
use std::hash::{Hash, Hasher};

/// An `(inbox, game)` pair, owned (`String`s or boxed `str`s) or borrowed.
pub trait GameIds {
    fn ids(&self) -> (&str, &str);
}

impl GameIds for (String, String) {
    fn ids(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl GameIds for (Box<str>, Box<str>) {
    fn ids(&self) -> (&str, &str) {
        (&self.0, &self.1)
    }
}

impl GameIds for (&str, &str) {
    fn ids(&self) -> (&str, &str) {
        (self.0, self.1)
    }
}

impl<'a> Borrow<dyn GameIds + 'a> for (String, String) {
    fn borrow(&self) -> &(dyn GameIds + 'a) {
        self
    }
}

impl<'a> Borrow<dyn GameIds + 'a> for (Box<str>, Box<str>) {
    fn borrow(&self) -> &(dyn GameIds + 'a) {
        self
    }
}

impl Hash for dyn GameIds + '_ {
    fn hash<H: Hasher>(&self, state: &mut H) {
        // The same calls as the derived `Hash` of `(String, String)` and of `(Box<str>, Box<str>)`.
        let (inbox, game) = self.ids();
        inbox.hash(state);
        game.hash(state);
    }
}

impl PartialEq for dyn GameIds + '_ {
    fn eq(&self, other: &Self) -> bool {
        self.ids() == other.ids()
    }
}

impl Eq for dyn GameIds + '_ {}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::hash_map::RandomState;
    use std::collections::HashMap;
    use std::hash::BuildHasher;

    #[test]
    fn a_borrowed_pair_hashes_and_finds_like_the_owned_one() {
        let state = RandomState::new();
        for (inbox, game) in [("lobby", "g1"), ("", ""), ("ab", "c"), ("a", "bc")] {
            let owned = (inbox.to_string(), game.to_string());
            let boxed: (Box<str>, Box<str>) = (inbox.into(), game.into());
            let borrowed: &dyn GameIds = &(inbox, game);
            assert_eq!(state.hash_one(&owned), state.hash_one(borrowed));
            assert_eq!(state.hash_one(&boxed), state.hash_one(borrowed));
        }
        let mut map = HashMap::new();
        map.insert(("ab".to_string(), "c".to_string()), 1);
        map.insert(("a".to_string(), "bc".to_string()), 2);
        assert_eq!(map.get(&("ab", "c") as &dyn GameIds), Some(&1));
        assert_eq!(map.get(&("a", "bc") as &dyn GameIds), Some(&2));
        assert_eq!(map.get(&("abc", "") as &dyn GameIds), None);
    }
}
