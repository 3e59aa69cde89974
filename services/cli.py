"""The ``dynbranch`` command: start the mesh, call it, run the demo and the benchmarks."""

from __future__ import annotations

import argparse
import asyncio
import importlib
import json
import signal
import sys
from typing import Any

from services.engine_agent import BACKEND_NAMES, MESH_BACKENDS, SERVER_BACKENDS
from services.restart_policy import RestartPolicy

SERVICES = {"gateway": "services.gateway.server", "engine": "services.engine_agent.server",
            "csl": "services.csl.server", "admission": "services.admission.server",
            "delivery": "services.delivery.server", "corpus": "services.corpus.server"}


SIM_PRESET = "qwen3-32b-h200"
#: The data set ``up`` loads into its corpus by default: HotpotQA's 200-question sample (1,971
#: paragraphs, 1.2 MB, loaded in ~0.15 s), the smallest of the shared data sets, and the one the
#: built-in react workflow searches.
UP_CORPUS_SOURCE = "hotpotqa"
#: ``--corpus-source`` value that runs no corpus service.
NO_CORPUS = "none"


def _mesh_args(parser: argparse.ArgumentParser, corpus_source: str = "") -> None:
    parser.add_argument("--engines", type=int, default=2, help="engine agents (default 2)")
    parser.add_argument("--model", default="qwen3-32b", help="model name (default qwen3-32b)")
    parser.add_argument("--preset", default=SIM_PRESET,
                        help="sim cost-model preset (default qwen3-32b-h200), or a real "
                        "backend's engine preset (tiny-cpu, its default)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="wall seconds per simulated second (default 1.0; 0 = no waiting)")
    parser.add_argument("--engine-set", action="append", default=[], metavar="KEY=VALUE",
                        help="extra engine agent setting (repeatable)")
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    parser.add_argument("--backend", default="sim", choices=BACKEND_NAMES,
                        help="engine of every agent: sim (default), vllm (embedded), openai (a "
                        "vLLM OpenAI server beside each agent), sglang (an SGLang server beside "
                        "each agent); servers are launched unless --engine-url is given")
    parser.add_argument("--engine-url", action="append", default=[], metavar="URL",
                        help="openai/sglang: a running server (one, or one per engine)")
    parser.add_argument("--model-path", default="", metavar="DIR",
                        help="real backends: model folder (default: the preset's tiny model)")
    parser.add_argument("--csl-shards", type=int, default=1, metavar="N",
                        help="csl shards, each its own process and LMDB environment; gateways "
                        "pick one by rendezvous hashing of the reuse name (default 1)")
    parser.add_argument("--gateways", type=int, default=1, metavar="N",
                        help="gateway replicas behind the same csl, admission and corpus "
                        "(default 1)")
    parser.add_argument("--corpus", default="", metavar="DIR",
                        help="retrieval corpus (LMDB folder, created when new) served by one "
                        "corpus service that every gateway shares; default with a corpus "
                        "source: a folder in the run folder")
    parser.set_defaults(corpus_default=corpus_source or NO_CORPUS)
    parser.add_argument("--corpus-source", metavar="NAME",
                        help="data set loaded into the corpus while it is empty (hotpotqa, "
                        f"musique, magento; from $DYNBRANCH_DATA_DIR, else ../shared/data), or "
                        f"{NO_CORPUS}: "
                        + _corpus_default_help(corpus_source))
    parser.add_argument("--set", action="append", default=[], dest="service_set",
                        metavar="SERVICE.KEY=VALUE",
                        help="a setting of one service (gateway, engine, csl, admission, "
                        "delivery, corpus), e.g. gateway.top_k=3 (repeatable); it wins "
                        "over DYNBRANCH_<SERVICE>_<KEY> in the environment, which wins over the "
                        "launcher's defaults (gateway auth=false, http_port=0)")
    parser.add_argument("--grpc-port", type=int, metavar="PORT",
                        help="the gateway's gRPC port; gateway i of --gateways N binds PORT+i "
                        "(default: DYNBRANCH_GATEWAY_PORT, else a free port)")
    parser.add_argument("--http-port", type=int, metavar="PORT",
                        help="the gateway's OpenAI/Anthropic HTTP port; gateway i binds PORT+i "
                        "(default: DYNBRANCH_GATEWAY_HTTP_PORT, else a free port)")


def _corpus_default_help(corpus_source: str) -> str:
    """The end of ``--corpus-source``'s help: what its default does in this command."""
    if not corpus_source:
        return "no corpus unless --corpus is given (default)"
    return (f"no corpus, writes and the retrieve tool refused (default {corpus_source}; when "
            "its data set is not mounted the corpus starts empty, filled only by writes, and "
            "a line says so)")


def _spec(args: argparse.Namespace) -> Any:
    from services.engine_presets import resolve_preset
    from services.launcher import MeshSpec

    if args.engines < 1:
        raise SystemExit("--engines: must be at least 1")
    for flag in ("csl_shards", "gateways"):
        if getattr(args, flag) < 1:
            raise SystemExit(f"--{flag.replace('_', '-')}: must be at least 1")
    try:
        preset = resolve_preset(args.backend, args.preset, SIM_PRESET)
    except ValueError as exc:
        raise SystemExit(str(exc)) from None
    if args.engine_url and args.backend not in SERVER_BACKENDS:
        raise SystemExit(f"--engine-url: only --backend {' or '.join(SERVER_BACKENDS)} speaks "
                         f"to a server")
    settings = _service_settings(args.service_set)
    grpc_port, http_port = _gateway_ports(args)
    return MeshSpec(engines=args.engines, model=args.model, preset=preset,
                    backend=args.backend, engine_urls=tuple(args.engine_url),
                    model_path=args.model_path,
                    time_scale=args.time_scale,
                    engine_settings=[*args.engine_set, *settings.pop("engine", [])],
                    gateway_settings=settings.pop("gateway", []), service_settings=settings,
                    log_level=args.log_level, csl_shards=args.csl_shards,
                    gateways=args.gateways, corpus_path=args.corpus,
                    gateway_grpc_port=grpc_port, gateway_http_port=http_port, **_corpus(args))


def _corpus(args: argparse.Namespace) -> dict[str, Any]:
    """The corpus fields of the mesh: the source, unless it is ``none``; the default source,
    when its data set is not mounted, gives way to an empty corpus (``_up`` says so), while a
    named one that is absent stops the command naming the file."""
    from services.corpus import DataUnavailable

    source = args.corpus_source or args.corpus_default
    if source == NO_CORPUS:
        return {}
    if source not in _loaders():
        raise SystemExit(f"--corpus-source: no data set {source!r} (have: "
                         f"{', '.join(sorted(_loaders()))}, or {NO_CORPUS})")
    try:
        next(iter(_loaders()[source](None)), None)  # reads the first record only
    except DataUnavailable as exc:
        if args.corpus_source is not None:
            raise SystemExit(f"--corpus-source {source}: {exc}") from None
        return {"corpus_empty": True}
    return {"corpus_source": source}


def _service_settings(items: list[str]) -> dict[str, list[str]]:
    """``SERVICE.KEY=VALUE`` items by service; SystemExit naming a malformed one."""
    out: dict[str, list[str]] = {}
    for item in items:
        service, dot, setting = item.partition(".")
        if not dot or service not in SERVICES or "=" not in setting:
            raise SystemExit(f"--set {item!r}: expected SERVICE.KEY=VALUE with SERVICE one of "
                             f"{', '.join(sorted(SERVICES))}")
        out.setdefault(service, []).append(setting)
    return out


def _gateway_ports(args: argparse.Namespace) -> tuple[int | None, int | None]:
    """The gateways' base gRPC and HTTP ports: the flag, else the environment (so that replicas
    take consecutive ports either way), else None (a free one each)."""
    return (_port(args.grpc_port, "--grpc-port", "port", 0),
            _port(args.http_port, "--http-port", "http_port", -1))


def _port(flag: int | None, name: str, key: str, low: int) -> int | None:
    """One base port: the flag's, else ``DYNBRANCH_GATEWAY_<KEY>``'s; SystemExit naming a bad
    one."""
    from services.common.values.config import ConfigError, env_port

    if flag is not None:
        if not low <= flag <= 65535:
            raise SystemExit(f"{name}: {flag} is not a port ({low} to 65535)")
        return flag
    try:
        return env_port("DYNBRANCH_GATEWAY_", key)
    except ConfigError as exc:
        raise SystemExit(str(exc)) from None


def _loaders() -> Any:
    from services.corpus import LOADERS

    return LOADERS


async def _up(args: argparse.Namespace) -> int:
    from services.launcher import ProcessMesh

    spec = _spec(args)
    policy = RestartPolicy()  # a service that exits is restarted
    # the logs go with a clean stop; a crash or a restart keeps them, as --keep-logs does
    mesh = ProcessMesh(keep_run_dir=args.keep_logs, supervise=policy)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        await mesh.start(spec)
        kept = "kept" if args.keep_logs else "removed on a clean stop; --keep-logs keeps them"
        print(f"dynbranch mesh is up (logs in {mesh.run_dir}, {kept}); Ctrl-C stops it")
        print(f"  a service that exits is restarted: {_supervision(policy)}")
        print(f"  {_corpus_line(spec)}")
        print(f"  {_tracing_line(mesh.children)}")
        for child in mesh.children:
            print(f"  {child.name:<10} grpc {child.address:<21} metrics "
                  f"http://127.0.0.1:{child.metrics_port}/metrics")
        http = next((c.http_address for c in mesh.children if c.http_address), "")
        if http:
            print(f"  openai-compatible API: http://{http}/v1 (chat/completions, completions, "
                  f"responses, models)")
            print(f"  anthropic messages API: http://{http} (v1/messages, "
                  f"v1/messages/count_tokens)")
        print(f"try: dynbranch call --gateway {mesh.address('gateway')} --prompt 'hello'",
              flush=True)
        await stop.wait()
    finally:
        await mesh.stop()
    print("dynbranch mesh stopped")
    return 0


def _corpus_line(spec: Any) -> str:
    """What the mesh retrieves from, in one line."""
    from services.corpus import default_data_dir

    if spec.corpus_empty and not spec.corpus_path:
        return (f"retrieval corpus: EMPTY, filled only by writes (the default data set "
                f"{UP_CORPUS_SOURCE} is not under {default_data_dir()}: mount the shared data "
                f"sets there, or pass --corpus-source NAME or --corpus DIR)")
    if not spec.corpus:
        return (f"retrieval corpus: none (--corpus-source {NO_CORPUS}): the retrieve tool and "
                f"record writes are refused")
    where = spec.corpus_path or "the run folder"
    return f"retrieval corpus: {spec.corpus_source or 'no data set'} in {where}"


def _tracing_line(children: Any) -> str:
    """Whether the services export spans and where to, in one line: each service's
    ``otlp_endpoint`` setting as it announced it (``OTEL_EXPORTER_OTLP_ENDPOINT``, or
    ``DYNBRANCH_<SERVICE>_OTLP_ENDPOINT`` / ``--set SERVICE.otlp_endpoint=...``)."""
    by_endpoint: dict[str, list[str]] = {}
    for child in children:
        by_endpoint.setdefault(child.otlp_endpoint, []).append(child.name)
    off = by_endpoint.pop("", [])
    if not by_endpoint:
        return ("tracing: off (no OTLP endpoint; OTEL_EXPORTER_OTLP_ENDPOINT=HOST:PORT, or --set "
                "SERVICE.otlp_endpoint=HOST:PORT for one service, exports spans over OTLP gRPC)")
    if not off and len(by_endpoint) == 1:
        return (f"tracing: on, spans exported over OTLP gRPC to {next(iter(by_endpoint))} "
                "(every service)")
    where = "; ".join(f"{endpoint} ({', '.join(names)})" for endpoint, names in by_endpoint.items())
    return (f"tracing: on, spans exported over OTLP gRPC to {where}"
            + (f"; off in {', '.join(off)}" if off else ""))


def _supervision(policy: RestartPolicy) -> str:
    """How ``up`` restarts a service, in words."""
    return (f"back-off {policy.backoff_s:g} s doubling to {policy.max_backoff_s:g} s; at most "
            f"{policy.max_restarts} restarts in {policy.window_s:g} s, then it is left down "
            f"with an error in the log")


async def _call(args: argparse.Namespace) -> int:
    import grpc

    from services.common.pb import common_pb2, gateway_pb2
    from services.gateway import GatewayClient

    demand = common_pb2.StageDemand(model=args.model, prompt=args.prompt,
                                    sampling=common_pb2.SamplingParams(
                                        max_tokens=args.max_tokens,
                                        temperature=args.temperature))
    async with GatewayClient(args.gateway, api_key=args.api_key) as client:
        try:
            reply = await client.call(gateway_pb2.CallRequest(demand=demand),
                                      timeout_s=args.timeout)
        except grpc.aio.AioRpcError as err:
            print(f"error: {err.code().name}: {err.details()}", file=sys.stderr)
            return 1
    t, u = reply.timings, reply.usage
    print(reply.text)
    print(f"--- engine {reply.engine_id or '-'} source "
          f"{gateway_pb2.ResultSource.Name(reply.source)} finish "
          f"{common_pb2.FinishReason.Name(reply.finish_reason)}")
    print(f"--- tokens prompt {u.prompt_tokens} (cached {u.cached_prompt_tokens}) completion "
          f"{u.completion_tokens}; engine s queue {t.queue_s:.3f} prefill {t.prefill_s:.3f} "
          f"decode {t.decode_s:.3f} total {t.total_s:.3f}; gateway s {reply.gateway_s:.3f}")
    return 0


#: ``bench`` flags only ``bench arms`` takes: flag → ``loadgen.bench.arms.run`` keyword.
ARMS_FLAGS = {"workload": "workload", "seed": "seed", "seeds": "seeds", "arrival": "arrival",
              "rate": "rate", "workflows": "workflows", "preset": "preset",
              "engines": "engines", "arms": "arms", "replay_rate": "replay_rate",
              "engine": "engine", "clock": "clock", "time_scale": "time_scale",
              "profile": "profile", "hop_ms": "hop_ms", "load": "load"}


def _arms_options(args: argparse.Namespace) -> dict[str, Any]:
    given = {key: getattr(args, flag) for flag, key in ARMS_FLAGS.items()
             if getattr(args, flag) is not None}
    if given and args.name != "arms":
        flags = ", ".join(f"--{f}" for f in given)
        raise SystemExit(f"{flags}: only `bench arms` takes these flags")
    if "arms" in given:
        given["arms"] = tuple(a.strip() for a in given["arms"].split(",") if a.strip())
    for flag in ("seeds", "workflows", "engines"):
        if flag in given and given[flag] < 1:
            raise SystemExit(f"--{flag}: must be at least 1")
    if "rate" in given and given["rate"] <= 0:
        raise SystemExit("--rate: must be > 0")
    if "rate" in given and "load" in given:
        raise SystemExit("--load: give a load level or --rate, not both")
    if "replay_rate" in given and not 0 <= given["replay_rate"] <= 1:
        raise SystemExit("--replay-rate: must be in [0, 1]")
    if "time_scale" in given and not given["time_scale"] > 0:
        raise SystemExit("--time-scale: must be > 0")
    if "hop_ms" in given and given["hop_ms"] < 0:
        raise SystemExit("--hop-ms: must be >= 0")
    return given


def _bench(args: argparse.Namespace) -> int:
    from loadgen.bench import runner
    from loadgen.data_needs import bench_files, prepare
    from services.corpus import DataUnavailable

    options = _arms_options(args)
    if args.minutes is not None:
        if args.name != "soak":
            raise SystemExit("--minutes: only `bench soak` takes it")
        if not args.minutes > 0:
            raise SystemExit("--minutes: must be > 0")
        options["minutes"] = args.minutes
    run = runner(args.name)
    try:
        prepare(bench_files(args.name, args.workload), args.data_dir)
        result = run(args.quick, **options)
    except DataUnavailable as exc:  # a missing data set is an error naming the file
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ValueError as exc:  # e.g. an unknown arm or too few instances for --workflows
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps(result, sort_keys=True))
    return 0 if result.get("ok", True) else 1


def _data_dir_arg(parser: argparse.ArgumentParser, readers: str = "") -> None:
    from services.corpus.loaders import DATA_DIR_ENV

    parser.add_argument("--data-dir", metavar="DIR",
                        help=f"folder of the shared data sets{readers} (default: "
                        f"${DATA_DIR_ENV}, else ../shared/data beside the repository); checked "
                        f"before the run starts")


def _report(args: argparse.Namespace) -> int:
    from loadgen.report.runner import main as report_main

    return report_main([*(["--full"] if args.full else []),
                        *(["--only", args.only] if args.only else []), "--out", args.out,
                        *(["--data-dir", args.data_dir] if args.data_dir else [])])


def _demo(args: argparse.Namespace) -> int:
    from loadgen.demo import run_demo

    return asyncio.run(run_demo(_spec(args), requests=args.requests,
                                concurrency=args.concurrency))


def _serve(args: argparse.Namespace) -> int:
    status: int = importlib.import_module(SERVICES[args.service]).main(args.rest)
    return status


def _arms_args(bench: argparse.ArgumentParser) -> None:
    from loadgen.arms.load_levels import LEVELS
    from loadgen.meshes.clocks import CLOCKS
    from loadgen.workloads import WORKLOADS
    from loadgen.workloads.profiles import PROFILES
    from loadgen.workloads.schedule import ARRIVALS

    arms = bench.add_argument_group("bench arms", "flags only `bench arms` takes")
    arms.add_argument("--workload", choices=tuple(WORKLOADS),
                      help="workload (default routing)")
    arms.add_argument("--seed", type=int, help="first schedule seed (default 0)")
    arms.add_argument("--seeds", type=int, metavar="N",
                      help="run N seeds: seed .. seed+N-1, arm order rotated per seed "
                      "(default 1)")
    arms.add_argument("--arrival", choices=list(ARRIVALS),
                      help="open-loop Poisson arrivals or a serial closed loop (default poisson)")
    arms.add_argument("--rate", type=float,
                      help="Poisson rate λ per simulated s (default: the workload's low load)")
    arms.add_argument("--load", choices=list(LEVELS),
                      help="a load level instead of --rate: the Poisson rate at which the "
                      "floor's mean latency is 1.0, 1.2, 1.7 or 2.3 x its idle value for this "
                      "workload, preset and engines (a calibrated search on the virtual mesh, "
                      "cached in .dynbranch/cache; the rate is reported). Where the data set "
                      "cannot load that many engines to the level, it runs on the most that it "
                      "can, and says so")
    arms.add_argument("--workflows", type=int, metavar="N",
                      help="measured workflows per seed (default 24 quick, 48 full, and more "
                      "at high rates: arrivals spread over at least 12 simulated s)")
    arms.add_argument("--preset", help="sim cost-model preset (default qwen3-32b-h200)")
    arms.add_argument("--engines", type=int, help="engine agents per mesh (default 2 quick, 4)")
    arms.add_argument("--replay-rate", type=float, metavar="P",
                      help="exact-replay rate of the schedule, in [0, 1] (dynbranch Fig. 10; "
                      "default: the workload's recurrence)")
    arms.add_argument("--engine", choices=MESH_BACKENDS,
                      help="engine under the mesh: the simulated one (default), or a real vLLM "
                      "(embedded) or SGLang (a server per agent) on the tiny random-weight model, "
                      "latency in wall time (quick: 6 workflows, floor and full)")
    arms.add_argument("--arms", metavar="A,B,...",
                      help="arms to run (floor always included; default quick: floor,c1,c2,"
                      "full,whole_request; full mode adds full_warm (priced from state learned "
                      "on the train split; virtual clock only),fixed,fixed1,fixed3,always,"
                      "threshold,load_threshold)")
    arms.add_argument("--clock", choices=list(CLOCKS),
                      help="virtual (default for the sim): every service in one process on a "
                      "virtual clock, latency = simulated engine time + waits + a modelled cost "
                      "per hop; live: gRPC servers in one process in wall time at --time-scale; "
                      "processes: every service its own process, as `dynbranch up` (the "
                      "cross-checks; real engines always run live)")
    arms.add_argument("--time-scale", type=float, metavar="S",
                      help="live or process mesh: wall seconds per simulated second (default 0.5; "
                      "at least 0.5)")
    arms.add_argument("--profile", choices=list(PROFILES),
                      help="schedule profile: data (recurrence as the data sets give it; "
                      "default), paper (Routing replays 45%%, ReAct repeats half its questions) "
                      "or window (data, with the deciding stage's decode capped so decisions "
                      "resolve while their fills still run)")
    arms.add_argument("--hop-ms", type=float, metavar="MS",
                      help="virtual mesh: modelled cost of one cross-service call (default 0.5)")


def build_parser() -> argparse.ArgumentParser:
    """The ``dynbranch`` argument parser."""
    from loadgen.bench import BENCHMARKS
    from loadgen.data_needs import bench_files

    parser = argparse.ArgumentParser(prog="dynbranch", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    up = sub.add_parser("up", help="start and supervise every service on loopback until Ctrl-C",
                        description="Start gateway, csl, admission, delivery, the corpus service "
                        f"every gateway shares (loaded with {UP_CORPUS_SOURCE} unless "
                        "--corpus-source says otherwise) and N engine agents (sim, or a real "
                        "engine with --backend), as processes on loopback; print addresses; "
                        "restart a service that exits (same port, flags and data folder; "
                        f"{_supervision(RestartPolicy())}); stop on Ctrl-C/SIGTERM: the "
                        "gateways first, so that they report their last outcomes to admission, "
                        "then the rest; the run folder (logs, csl store, the default corpus) is "
                        "removed on a clean stop.")
    _mesh_args(up, corpus_source=UP_CORPUS_SOURCE)
    up.add_argument("--keep-logs", action="store_true",
                    help="keep the run folder after a clean stop too (it is always kept when a "
                    "service crashed or was restarted)")
    up.set_defaults(run=lambda a: asyncio.run(_up(a)))
    call = sub.add_parser("call", help="send one stage through the gateway",
                          description="Send one stage demand to the gateway and print the answer "
                          "and its timings.")
    call.add_argument("--gateway", required=True, metavar="HOST:PORT", help="gateway address")
    call.add_argument("--prompt", required=True, help="rendered prompt")
    call.add_argument("--model", default="qwen3-32b", help="model (default qwen3-32b)")
    call.add_argument("--max-tokens", type=int, default=64, help="max tokens (default 64)")
    call.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    call.add_argument("--api-key", default="", help="API key sent as a bearer token")
    call.add_argument("--timeout", type=float, default=120.0, help="deadline in seconds")
    call.set_defaults(run=lambda a: asyncio.run(_call(a)))
    demo = sub.add_parser("demo", help="start the mesh, send a batch, print a summary",
                          description="The main job on the embedded default: start the mesh with "
                          "simulated engines, run a small batch of Routing workflows through the "
                          "gateway (early fill and exact reuse on), print a summary.")
    _mesh_args(demo)
    demo.set_defaults(time_scale=0.02)
    demo.add_argument("--requests", type=int, default=12,
                      help="routing workflows to run (default 12)")
    demo.add_argument("--concurrency", type=int, default=4,
                      help="workflows in flight at once (default 4)")
    demo.set_defaults(run=_demo)
    bench = sub.add_parser("bench", help="run a benchmark",
                           description="Run a benchmark; figures that compare are ratios "
                           "measured side by side in one run.")
    bench.add_argument("name", choices=sorted(BENCHMARKS), help="benchmark")
    bench.add_argument("--quick", action="store_true", help="finish in under a minute")
    bench.add_argument("--json", action="store_true", help="print one JSON object last")
    bench.add_argument("--minutes", type=float,
                       help="bench soak: minutes to run (default 2; 0.5 with --quick)")
    _data_dir_arg(bench, " that bench " + ", ".join(
        n for n in sorted(BENCHMARKS) if bench_files(n, None)) + " read")
    _arms_args(bench)
    bench.set_defaults(run=_bench)
    from loadgen.report import arguments as report_arguments

    report = sub.add_parser("report", help="run the experiment matrix and write the report",
                            description=report_arguments.DESCRIPTION)
    report_arguments.add_arguments(report)
    _data_dir_arg(report)
    report.set_defaults(run=_report)
    calibrate = sub.add_parser("calibrate", help="fit a sim preset to a real engine",
                               description="Measure an engine backend's prefill throughput and "
                               "decode step time and fit the sim's cost model to them "
                               "(flags after 'calibrate' go to it: dynbranch calibrate --help).",
                               add_help=False)
    calibrate.set_defaults(run=None)  # handled in main(): every flag belongs to the calibrator
    serve = sub.add_parser("serve", help="run one service in the foreground",
                           description="Run one service; flags after the name go to it "
                           "(dynbranch serve engine --help).")
    serve.add_argument("service", choices=sorted(SERVICES))
    serve.add_argument("rest", nargs=argparse.REMAINDER, help="the service's own flags")
    serve.set_defaults(run=_serve)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``dynbranch`` console script."""
    from services.common.runtime.server import install_uvloop

    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["calibrate"]:
        from services.engine_agent.calibrate import main as calibrate

        return calibrate(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command != "serve":
        install_uvloop()
    return args.run(args) or 0


__all__ = ["build_parser", "main"]


if __name__ == "__main__":
    sys.exit(main())
