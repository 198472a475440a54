//! `pipehub loadgen --hub URL --games G --duration SECONDS [--rate MOVES_PER_S]
//! [--protocol REF] [--signed] [--json]`: a benchmark client for a running hub (the work is
//! in [`crate::loadgen`]; this module only reads flags and prints the report).
//!
//! Exit codes: 0 when the run completed; 1 when the hub's limits refused part of it or no
//! move was accepted (the figures would not describe the hub); 2 when it could not start
//! (bad flags, an unreachable hub, too few file descriptors).

use crate::loadgen::{self, Config, LoadgenError, Outcome};
use std::time::Duration;

/// Arguments of `pipehub loadgen`.
#[derive(Debug, clap::Args)]
pub struct Args {
    /// The hub's base URL.
    #[arg(long, value_name = "URL")]
    pub hub: String,
    /// Concurrent seated games, two WebSocket seats each.
    #[arg(long, value_name = "G")]
    pub games: usize,
    /// Measured seconds of play (after every game is seated).
    #[arg(long, value_name = "SECONDS")]
    pub duration: f64,
    /// Cap on offered moves a second across all games (default: as fast as the hub answers).
    #[arg(long, value_name = "MOVES_PER_S")]
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
    #[arg(long, value_name = "N", default_value_t = 1)]
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
        print_plain(&config, &outcome);
    }
    let advice = outcome.limit_advice();
    for line in &advice {
        eprintln!("pipehub loadgen: {line}");
    }
    if let Some(e) = &outcome.first_error {
        eprintln!("pipehub loadgen: first error: {e}");
    }
    let limited = outcome.rate_limited > 0
        || outcome.open_games_cap > 0
        || outcome.sockets_cap > 0
        || outcome.connections_cap > 0;
    Ok(if limited || outcome.report.moves == 0 {
        1
    } else {
        0
    })
}

fn print_plain(config: &Config, o: &Outcome) {
    let r = &o.report;
    let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
    // The memory an open game costs is divided among the games that were seated, which a
    // hub's limits can make fewer than asked for.
    let open = o.seated.max(1) as f64;
    println!(
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
    );
    println!("moves     {} accepted, {:.1}/s", r.moves, r.moves_per_s);
    let l = &r.latency_ms;
    println!(
        "latency   move -> opponent's game.state: p50 {:.3} ms, p90 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
        l.p50, l.p90, l.p99, l.max
    );
    println!("refused   {}", r.refused);
    println!("errors    {}", r.errors);
    let per_move = |cpu: f64| cpu * 1e6 / r.moves.max(1) as f64;
    match (r.cpu_s.hub, r.cpu_s.loadgen) {
        (Some(hub), Some(own)) => println!(
            "cpu       hub {hub:.1} s ({:.1} µs a move), load generator {own:.1} s ({:.1} µs a move), while the clock ran",
            per_move(hub),
            per_move(own)
        ),
        (None, Some(own)) => println!(
            "cpu       load generator {own:.1} s ({:.1} µs a move) while the clock ran; the hub's is not in its /metrics",
            per_move(own)
        ),
        _ => {}
    }
    if let Some(steal) = r.machine_steal_s {
        println!("steal     {steal:.2} CPU s taken from this machine by its hypervisor while the clock ran");
    }
    match (r.hub_rss_bytes, o.rss_before) {
        (Some(end), Some(before)) => println!(
            "hub rss   {:.1} MiB with the games open ({:.1} MiB before; {:.1} KiB more per open game)",
            mib(end),
            mib(before),
            (end.saturating_sub(before)) as f64 / 1024.0 / open
        ),
        (Some(end), None) => println!("hub rss   {:.1} MiB with the games open", mib(end)),
        _ => println!("hub rss   unknown"),
    }
    if let (Some(seated), Some(before)) = (r.hub_rss_seated_bytes, o.rss_before) {
        println!(
            "          {:.1} MiB once the games were seated, before any move ({:.1} KiB more per open game)",
            mib(seated),
            (seated.saturating_sub(before)) as f64 / 1024.0 / open
        );
    }
}
