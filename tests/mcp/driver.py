"""Drives `pipehub mcp` agents with the official MCP Python SDK, for pipehub's tests.

The Rust tests in tests/tests/mcp_*.rs start a hub and run this script with the Python of
the virtual environment that scripts/test creates (.venv/mcp, PyPI `mcp`). The script
speaks to each agent exactly as an MCP host would: it spawns `pipehub mcp` over stdio,
initializes a session, lists the tools and calls them. It writes every tool result, one
JSON object a line, to --out, so the Rust side can check games and scan for secrets.

Scenarios:
  play   two agents play full games of every protocol (and one resignation) on one hub.
  short  two agents play the first two moves of a tic-tac-toe game, then stop.
  look   one agent (resuming from its state directory) lists its games and shows each.
  resume a rock-paper-scissors game whose X agent stops after committing and restarts.

Nothing here chooses a move by itself: the moves are scripted, as a person's would be.
"""

import argparse
import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

TOOLS = {"game_new", "game_join", "game_move", "game_board", "game_wait", "game_resign", "game_list"}


class Agent:
    """One `pipehub mcp` process and its MCP session."""

    def __init__(self, name, session, out):
        self.name = name
        self.session = session
        self.out = out

    async def call(self, tool, **args):
        result = await self.session.call_tool(tool, args, read_timeout_seconds=120)
        text = "\n".join(c.text for c in result.content if getattr(c, "type", "") == "text")
        record = {
            "agent": self.name,
            "tool": tool,
            "args": args,
            "isError": result.is_error,
            "structuredContent": result.structured_content,
            "text": text,
        }
        self.out.write(json.dumps(record) + "\n")
        self.out.flush()
        return record

    async def ok(self, tool, **args):
        r = await self.call(tool, **args)
        if r["isError"]:
            raise SystemExit(f"{self.name} {tool} {args} failed: {r['text']}")
        return r["structuredContent"]

    async def wait_turn(self, game):
        """Waits until it is this seat's turn (or the game is over)."""
        for _ in range(10):
            s = await self.ok("game_wait", game=game, timeoutSeconds=20)
            if s["yourTurn"] or (s.get("result") or {}).get("status") in ("win", "draw"):
                return s
        raise SystemExit(f"{self.name}: never got the turn in {game}")


async def open_agent(stack, name, args, state_dir, out):
    log = open(os.path.join(args.logs, f"{name}.log"), "w")
    stack.callback(log.close)
    params = StdioServerParameters(
        command=args.pipehub,
        args=["mcp", "--hub", args.hub, "--inbox", args.inbox, "--state-dir", state_dir],
        # The most verbose logs, so the secrets scan sees everything the agent could log.
        env={"PIPEHUB_LOG": os.environ.get("PIPEHUB_AGENT_LOG", "trace")},
    )
    read, write = await stack.enter_async_context(stdio_client(params, errlog=log))
    session = await stack.enter_async_context(ClientSession(read, write))
    await session.initialize()
    tools = await session.list_tools()
    names = {t.name for t in tools.tools}
    if names != TOOLS:
        raise SystemExit(f"tools: {sorted(names)}")
    for t in tools.tools:
        if t.input_schema.get("type") != "object" or "they are playing, not you" not in (t.description or ""):
            raise SystemExit(f"tool {t.name}: schema or description")
    return Agent(name, session, out)


async def pair(a, b, protocol, rules=None):
    args = {"protocol": protocol}
    if rules:
        args["rules"] = rules
    created = await a.ok("game_new", **args)
    joined = await b.ok("game_join", code=created["pairingCode"])
    assert joined["game"] == created["game"], (joined, created)
    return created["game"]


async def play_grid(a, b, protocol, moves):
    """Alternate moves X (a), O (b) from a script of moves."""
    game = await pair(a, b, protocol)
    seats = [a, b]
    for i, mv in enumerate(moves):
        mover = seats[i % 2]
        s = await mover.wait_turn(game)
        assert s["yourTurn"], s
        await mover.ok("game_move", game=game, move=mv)
    return game


async def play_rps(a, b):
    """Best of 3: X rock / O scissors, a tie (rock / rock), X paper / O rock. O chooses
    first in the second round, so the agent holds O's choice until its commit turn."""
    game = await pair(a, b, "pipehub:rock-paper-scissors", {"bestOf": 3})
    rounds = [("rock", "scissors", "x"), ("rock", "rock", "o"), ("paper", "rock", "x")]
    for x, o, first in rounds:
        await b.wait_turn(game)
        await a.wait_turn(game)
        if first == "o":
            held = await b.ok("game_move", game=game, move={"choice": o})
            assert held["view"]["pendingChoice"] == o, held
            await a.ok("game_move", game=game, move={"choice": x})
        else:
            await a.ok("game_move", game=game, move={"choice": x})
            await b.ok("game_move", game=game, move={"choice": o})
    return game


async def final(agent, game):
    for _ in range(10):
        s = await agent.ok("game_wait", game=game, timeoutSeconds=20)
        if (s.get("result") or {}).get("status") in ("win", "draw"):
            return s
    raise SystemExit(f"{agent.name}: {game} never ended")


async def scenario_play(a, b, summary):
    ttt = await play_grid(a, b, "pipehub:tic-tac-toe",
                          [{"row": 0, "col": 0}, {"row": 0, "col": 1}, {"row": 1, "col": 1},
                           {"row": 0, "col": 2}, {"row": 2, "col": 2}])
    c4 = await play_grid(a, b, "pipehub:connect-four",
                         [{"col": 0}, {"col": 1}, {"col": 0}, {"col": 1}, {"col": 0}, {"col": 1}, {"col": 0}])
    rps = await play_rps(a, b)
    # A refused move: a taken square, judged by the agent against its verified board.
    resign = await play_grid(a, b, "pipehub:tic-tac-toe", [{"row": 1, "col": 1}])
    await b.wait_turn(resign)
    refused = await b.call("game_move", game=resign, move={"row": 1, "col": 1})
    assert refused["isError"] and "occupied" in refused["text"], refused
    await b.ok("game_resign", game=resign)
    # A move after the end, refused by the agent's own check: an error with the true state.
    late = await b.call("game_move", game=resign, move={"row": 0, "col": 0})
    assert late["isError"], late
    # A code nobody issued: an error result, and the seat minted for it is forgotten.
    unknown = await b.call("game_join", code="ZZZZZZZZ")
    assert unknown["isError"] and "not_found" in unknown["text"], unknown
    for name, game in [("tic-tac-toe", ttt), ("connect-four", c4), ("rock-paper-scissors", rps), ("resign", resign)]:
        summary[name] = {"game": game, "X": await final(a, game), "O": await final(b, game)}
    summary["listX"] = await a.ok("game_list")
    summary["listO"] = await b.ok("game_list")


async def scenario_short(a, b, summary):
    game = await play_grid(a, b, "pipehub:tic-tac-toe", [{"row": 1, "col": 1}, {"row": 0, "col": 0}])
    summary["game"] = game
    summary["X"] = await a.ok("game_board", game=game)


async def scenario_resume(args, out, summary):
    """X commits a rock-paper-scissors choice, its agent stops; O commits; a new agent for
    X, started from the same state directory, reveals X's choice by itself (the nonce is
    derived from the seat key, never stored) and plays on to the end."""
    async with AsyncExitStack() as stack_b:
        b = await open_agent(stack_b, "b", args, args.state[1], out)
        async with AsyncExitStack() as stack_a:
            a = await open_agent(stack_a, "a", args, args.state[0], out)
            game = await pair(a, b, "pipehub:rock-paper-scissors", {"bestOf": 1})
            await a.wait_turn(game)
            await a.ok("game_move", game=game, move={"choice": "paper"})
        await b.ok("game_move", game=game, move={"choice": "rock"})
        stopped = await b.ok("game_board", game=game)
        summary["whileStopped"] = stopped
        async with AsyncExitStack() as stack_a:
            a = await open_agent(stack_a, "a", args, args.state[0], out)
            summary["X"] = await final(a, game)
        summary["O"] = await final(b, game)
        summary["game"] = game


async def scenario_look(a, summary):
    listed = await a.call("game_list")
    summary["list"] = listed
    summary["boards"] = []
    for s in (listed["structuredContent"] or {}).get("seats", []):
        summary["boards"].append(await a.call("game_board", game=s["game"]))


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("scenario", choices=["play", "short", "look", "resume"])
    p.add_argument("--pipehub", required=True)
    p.add_argument("--hub", required=True)
    p.add_argument("--inbox", default="default")
    p.add_argument("--state", action="append", required=True, help="state directory, one per agent")
    p.add_argument("--logs", required=True)
    p.add_argument("--out", required=True)
    args = p.parse_args()
    summary = {}
    with open(args.out, "w") as out:
        async with AsyncExitStack() as stack:
            if args.scenario == "resume":
                await scenario_resume(args, out, summary)
                print(json.dumps(summary))
                return
            agents = []
            for i, state in enumerate(args.state):
                agents.append(await open_agent(stack, "ab"[i], args, state, out))
            if args.scenario == "play":
                await scenario_play(agents[0], agents[1], summary)
            elif args.scenario == "short":
                await scenario_short(agents[0], agents[1], summary)
            else:
                await scenario_look(agents[0], summary)
    print(json.dumps(summary))


if __name__ == "__main__":
    try:
        asyncio.run(main())
    except AssertionError as e:
        print(f"assertion failed: {e!r}", file=sys.stderr)
        sys.exit(1)
