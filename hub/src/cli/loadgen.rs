//! `pipehub loadgen --hub URL --games G --duration SECONDS [--rate MOVES_PER_S]
//! [--protocol REF] [--signed] [--json]`: a benchmark client for a running hub (the work is
//! in [`crate::loadgen`]; this module only reads flags and prints the report).
//!
//! Exit codes: 0 when the run completed; 1 when the hub's limits refused part of it, no
//! move was accepted, or the hub went away before the end (the figures would not describe
//! the hub), each said on stderr; 2 when it could not start (bad flags, an unreachable hub,
//! too few file descriptors).

use crate::loadgen::{self, Config, LoadgenError, Outcome};
use std::fmt::Write as _;
use std::time::Duration;

/// Arguments of `pipehub loadgen`. The numbers are read as numbers even when negative
/// (`--duration -1`), so that they get this command's own range messages rather than the
/// parser's "unexpected argument '-1'".
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The hub's base URL.
    #[arg(long, value_name = "URL")]
    pub hub: String,
    /// Concurrent seated games, two WebSocket seats each.
    #[arg(long, value_name = "G", allow_negative_numbers = true)]
    pub games: usize,
    /// Measured seconds of play (after every game is seated).
    #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
    pub duration: f64,
    /// Cap on offered moves a second across all games (default: as fast as the hub answers).
    #[arg(long, value_name = "MOVES_PER_S", allow_negative_numbers = true)]
    pub rate: Option<f64>,
    /// The game to play: pipehub:tic-tac-toe, pipehub:connect-four or
    /// pipehub:rock-paper-scissors.
    #[arg(long, value_name = "REF", default_value = "pipehub:tic-tac-toe")]
    pub protocol: String,
    /// Play signed games with hub-held keys (default: unsigned).
    #[arg(long)]
    pub signed: bool,
    /// Print one JSON object instead of the plain report.
    #[arg(long)]
    pub json: bool,
    /// Threads the load generator runs on. One by default: on a machine it shares with the
    /// hub, a second thread mostly buys cross-thread wake-ups, paid for out of the hub's
    /// CPU.
    #[arg(
        long,
        value_name = "N",
        default_value_t = 1,
        allow_negative_numbers = true
    )]
    pub threads: usize,
}

pub fn run(args: Args) -> anyhow::Result<i32> {
    if !(args.duration.is_finite() && args.duration > 0.0 && args.duration <= 86_400.0) {
        eprintln!("pipehub loadgen: --duration must be more than 0 and at most 86400 seconds");
        return Ok(2);
    }
    if let Some(Err(e)) = args.rate.map(loadgen::check_rate) {
        eprintln!("pipehub loadgen: {e}");
        return Ok(2);
    }
    let config = Config {
        hub: args.hub,
        games: args.games,
        duration: Duration::from_secs_f64(args.duration),
        rate: args.rate,
        protocol: args.protocol,
        signed: args.signed,
    };
    if !(1..=64).contains(&args.threads) {
        eprintln!("pipehub loadgen: --threads must be between 1 and 64");
        return Ok(2);
    }
    let runtime = if args.threads == 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .build()?
    };
    let outcome = match runtime.block_on(loadgen::run(config.clone())) {
        Ok(o) => o,
        Err(LoadgenError::Usage(e)) => {
            eprintln!("pipehub loadgen: {e}");
            return Ok(2);
        }
        Err(e @ LoadgenError::Unreachable { .. }) => {
            eprintln!("pipehub loadgen: {e}");
            return Ok(2);
        }
    };
    // The tables are finished or aborted; do not wait on stragglers.
    runtime.shutdown_timeout(Duration::from_secs(1));
    if args.json {
        println!("{}", serde_json::to_string(&outcome.report)?);
    } else {
        print!("{}", plain(&config, &outcome));
    }
    let advice = outcome.limit_advice();
    let problems = outcome.problems();
    for line in advice.iter().chain(&problems).chain(&outcome.warnings()) {
        eprintln!("pipehub loadgen: {line}");
    }
    if let Some(e) = &outcome.first_error {
        eprintln!("pipehub loadgen: first error: {e}");
    }
    let limited = outcome.rate_limited > 0
        || outcome.pairing_limited > 0
        || outcome.open_games_cap > 0
        || outcome.sockets_cap > 0
        || outcome.connections_cap > 0;
    Ok(if limited || !problems.is_empty() {
        1
    } else {
        0
    })
}

/// The plain report, one figure a line; a figure with nothing measured is `n/a`.
fn plain(config: &Config, o: &Outcome) -> String {
    let mut out = String::new();
    // Writing to a String cannot fail.
    let _ = write_plain(&mut out, config, o);
    out
}

fn write_plain(out: &mut String, config: &Config, o: &Outcome) -> std::fmt::Result {
    let r = &o.report;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    // The memory an open game costs is divided among the games that were seated, which a
    // hub's limits can make fewer than asked for.
    let open = o.seated.max(1) as f64;
    writeln!(
        out,
        "{} games of {} ({}), {:.1} s{}{}",
        r.games,
        config.protocol,
        if config.signed {
            "signed, hub-held keys"
        } else {
            "unsigned"
        },
        r.duration_s,
        config
            .rate
            .map(|x| format!(", offered at most {x} moves/s"))
            .unwrap_or_default(),
        if o.seated < r.games {
            format!("; only {} of them seated", o.seated)
        } else {
            String::new()
        }
    )?;
    writeln!(
        out,
        "moves     {} accepted, {:.1}/s",
        r.moves, r.moves_per_s
    )?;
    let l = &r.latency_ms;
    let ms = |v: Option<f64>| v.map_or("n/a".into(), |v| format!("{v:.3} ms"));
    writeln!(
        out,
        "latency   move -> opponent's game.state: p50 {}, p90 {}, p99 {}, max {}",
        ms(l.p50),
        ms(l.p90),
        ms(l.p99),
        ms(l.max)
    )?;
    writeln!(out, "refused   {}", r.refused)?;
    writeln!(out, "errors    {}", r.errors)?;
    // No move, no cost a move: dividing by one instead would make one up.
    let per_move = |cpu: f64| match r.moves {
        0 => "n/a a move".to_string(),
        n => format!("{:.1} µs a move", cpu * 1e6 / n as f64),
    };
    match (r.cpu_s.hub, r.cpu_s.loadgen) {
        (Some(hub), Some(own)) => writeln!(
            out,
            "cpu       hub {hub:.1} s ({}), load generator {own:.1} s ({}), while the clock ran",
            per_move(hub),
            per_move(own)
        )?,
        (None, Some(own)) => writeln!(
            out,
            "cpu       load generator {own:.1} s ({}) while the clock ran; the hub's is not in its /metrics",
            per_move(own)
        )?,
        _ => {}
    }
    if let Some(steal) = r.machine_steal_s {
        writeln!(
            out,
            "steal     {steal:.2} CPU s taken from this machine by its hypervisor while the clock ran"
        )?;
    }
    match (r.hub_rss_bytes, o.rss_before) {
        (Some(end), Some(before)) => writeln!(
            out,
            "hub rss   {:.1} MiB with the games open ({:.1} MiB before; {:.1} KiB more per open game)",
            mib(end),
            mib(before),
            (end.saturating_sub(before)) as f64 / 1024.0 / open
        )?,
        (Some(end), None) => writeln!(out, "hub rss   {:.1} MiB with the games open", mib(end))?,
        _ => writeln!(out, "hub rss   unknown")?,
    }
    if let (Some(seated), Some(before)) = (r.hub_rss_seated_bytes, o.rss_before) {
        writeln!(
            out,
            "          {:.1} MiB once the games were seated, before any move ({:.1} KiB more per open game)",
            mib(seated),
            (seated.saturating_sub(before)) as f64 / 1024.0 / open
        )?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::loadgen::CpuSeconds;
    use clap::Parser;

    type Wrapper = crate::cli::Parsed<Args>;

    /// A negative number after a space is the flag's value, not another flag: the range
    /// checks then say what is wrong with it.
    #[test]
    fn negative_numbers_are_values_for_the_range_checks() {
        let parse = |flags: &[&str]| {
            let mut argv = vec!["loadgen", "--hub", "http://127.0.0.1:1"];
            argv.extend_from_slice(flags);
            Wrapper::try_parse_from(argv)
        };
        let w = parse(&["--games", "2", "--duration", "-1", "--rate", "-5"]).expect("parsed");
        assert_eq!((w.args.duration, w.args.rate), (-1.0, Some(-5.0)));
        assert_eq!(run(w.args).ok(), Some(2), "--duration -1 is refused");
        let e = parse(&["--games", "-3", "--duration", "1"]).expect_err("a count is not negative");
        assert!(e.to_string().contains("'-3' for '--games <G>'"), "{e}");
    }

    fn config() -> Config {
        Config {
            hub: "http://127.0.0.1:8080".into(),
            games: 2,
            duration: Duration::from_secs(1),
            rate: None,
            protocol: "pipehub:tic-tac-toe".into(),
            signed: false,
        }
    }

    /// A run without a move shows no latency and no CPU a move (it showed 0.000 ms, and
    /// the CPU divided by one move), while the figures it did read stay.
    #[test]
    fn figures_with_nothing_measured_are_not_made_up() {
        let mut o = Outcome::example(0);
        o.report.cpu_s = CpuSeconds {
            hub: Some(0.0035),
            loadgen: Some(0.01),
        };
        let text = plain(&config(), &o);
        assert!(
            text.contains("p50 n/a, p90 n/a, p99 n/a, max n/a"),
            "{text}"
        );
        assert!(text.contains("hub 0.0 s (n/a a move)"), "{text}");
        assert!(
            !text.contains("µs a move") && !text.contains("0.000 ms"),
            "{text}"
        );

        let mut o = Outcome::example(1000);
        o.report.latency_ms.p50 = Some(1.5);
        o.report.cpu_s.hub = Some(0.1);
        o.report.cpu_s.loadgen = Some(0.05);
        let text = plain(&config(), &o);
        assert!(text.contains("p50 1.500 ms, p90 n/a"), "{text}");
        assert!(text.contains("hub 0.1 s (100.0 µs a move)"), "{text}");
    }
}
